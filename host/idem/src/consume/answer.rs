//! What the engine's answer for one delivery means for the delivery: its
//! end (counted and shown), and whether it is acknowledged, put off or
//! terminated (the table in the module docs of [`super`]).
//!
//! Every delivery has one of three fates, decided here: run (acknowledged
//! once its end is recorded, or put off while a take-over is the policy's
//! to decide); put off because the store or the broker is unavailable, and
//! only then; or refused for good (terminated) with a note naming what was
//! wrong. What no message could get past (a command that cannot start, a
//! policy not registered, a store that failed for good) stops the consumer
//! instead ([`Halt::Stop`]): putting the message off would loop for ever,
//! terminating it would throw away a good message.

use std::time::Duration;

use idem_core::Operation;
use idem_store::{ErrorClass, RecordState, StoreError};

use super::{ConsumeOptions, Delivery, RETRY_DELAY};
use crate::engine::{Begin, Engine, EngineError};
use crate::job::{Effect, End, Finisher, Performed, run_effect_recording};

/// What happens to a delivery once the engine has answered.
pub(super) enum Settle {
    Ack,
    Nack(Duration),
    Term,
    /// Forwarded to the review destination with these headers, then
    /// acknowledged.
    Review(Vec<(&'static str, String)>),
}

/// Whether the consumer goes on after a delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Halt {
    /// It goes on.
    No,
    /// The store was unavailable past the outage budget.
    Outage,
    /// No message can be run until someone changes something: why.
    Stop(String),
}

/// How `begun` ends for a delivery: the end, what to do with the delivery,
/// a note, and whether the consumer goes on.
#[allow(clippy::too_many_arguments)]
pub(super) async fn answer<E: Effect>(
    engine: &Engine,
    finisher: &Finisher,
    effect: &E,
    op: Operation,
    begun: Result<Begin, EngineError>,
    options: &ConsumeOptions,
    delivery: &dyn Delivery,
) -> (End, Settle, Option<String>, Halt) {
    let at = delivery.describe();
    let later = |ms: Option<u64>| {
        ms.map_or(RETRY_DELAY, Duration::from_millis)
            .clamp(RETRY_DELAY, options.max_redelivery_delay)
    };
    match begun {
        Ok(Begin::Execute(execution)) => {
            let lease = execution.lease();
            // The end goes to the consumer's finisher, which records the
            // ends that arrive together in one store call.
            let ran =
                run_effect_recording(effect, op, execution, async |execution, ending, outcome| {
                    finisher
                        .record(execution.into_finish(ending, outcome))
                        .await
                })
                .await;
            match ran {
                Ok(Performed::Completed) => (End::Executed, Settle::Ack, None, Halt::No),
                Ok(Performed::Failed {
                    retryable: false, ..
                }) => (End::Failed, Settle::Ack, None, Halt::No),
                Ok(Performed::Failed { .. }) => {
                    (End::Failed, Settle::Nack(RETRY_DELAY), None, Halt::No)
                }
                // The command cannot start: not this message's fault (a
                // command missing, workers that keep dying), and the same
                // for every message, so the consumer stops; the delivery
                // goes back at once (its record is failed-retryable: run
                // again when delivered again).
                Ok(Performed::NotStarted { reason }) => (
                    End::Failed,
                    Settle::Nack(Duration::ZERO),
                    Some(format!("{at}: {reason}; put back")),
                    Halt::Stop(format!("the command cannot start: {reason}")),
                ),
                // The claim lapses after its lease; delivered again then,
                // the policy decides.
                Ok(Performed::Unknown { reason }) => (
                    End::Unknown,
                    Settle::Nack(lease.min(options.max_redelivery_delay)),
                    Some(format!("{at}: {reason}; outcome unknown")),
                    Halt::No,
                ),
                // Deposed: the record is its taker's to settle.
                Err(EngineError::Fenced(e)) => (
                    End::Fenced,
                    Settle::Ack,
                    Some(format!("{at}: deposed while running: {e}")),
                    Halt::No,
                ),
                Err(e) => (
                    End::Unknown,
                    Settle::Nack(lease.min(options.max_redelivery_delay)),
                    Some(format!("{at}: {e}")),
                    if e.is_store_unavailable() {
                        Halt::Outage
                    } else {
                        Halt::No
                    },
                ),
            }
        }
        Ok(Begin::Replay(r)) if r.state == RecordState::Completed => {
            (End::Replayed, Settle::Ack, None, Halt::No)
        }
        Ok(Begin::Replay(_)) => (End::ReplayedFailure, Settle::Ack, None, Halt::No),
        Ok(Begin::InProgress { retry_after_ms, .. }) => (
            End::InProgress,
            Settle::Nack(later(retry_after_ms)),
            None,
            Halt::No,
        ),
        Ok(Begin::Rejected {
            marked_unknown: true,
            reason,
            key,
            ..
        }) => {
            let then = match options.review_to {
                None => Settle::Ack,
                Some(_) => Settle::Review(vec![
                    ("idem-namespace", key.namespace.clone()),
                    ("idem-key", key.digest.to_string()),
                    ("idem-reason", reason.clone()),
                    ("idem-delivery", at.clone()),
                ]),
            };
            (
                End::SentToReview,
                then,
                Some(format!("{at}: sent key {} to review: {reason}", key.digest)),
                Halt::No,
            )
        }
        Ok(Begin::Rejected {
            retry_after_ms: Some(ms),
            reason,
            ..
        }) => (
            End::Rejected,
            Settle::Nack(later(Some(ms))),
            Some(format!("{at}: rejected for now: {reason}")),
            Halt::No,
        ),
        Ok(Begin::Rejected { reason, key, .. }) => {
            match engine.store().records().get(&key).await {
                // A duplicate of a record waiting in review: its request
                // is there for a person already (the delivery that found
                // the claim lapsed was acknowledged, and forwarded with
                // --review-to). Acknowledged on every broker: terminating
                // it would put the same request in a dead-letter queue too.
                Ok(Some(view)) if view.record.state == RecordState::OutcomeUnknown => (
                    End::Rejected,
                    Settle::Ack,
                    Some(format!(
                        "{at}: a duplicate of key {}, which waits in review ({reason}): \
                         acknowledged",
                        key.digest
                    )),
                    Halt::No,
                ),
                // Asked again once the store is back.
                Err(e) if e.is_unavailable() => (
                    End::NotRun,
                    Settle::Nack(RETRY_DELAY),
                    Some(format!("{at}: not run: {e}")),
                    Halt::No,
                ),
                _ => (
                    End::Rejected,
                    Settle::Term,
                    Some(format!("{at}: rejected: {reason}; terminated")),
                    Halt::No,
                ),
            }
        }
        Ok(Begin::Conflict { key, reason, .. }) => (
            End::Conflict,
            Settle::Term,
            Some(format!(
                "{at}: conflict on key {}: {reason}; terminated",
                key.digest
            )),
            Halt::No,
        ),
        Err(e) => not_begun(e, &at),
    }
}

/// A delivery whose operation could not be begun: `e` says whose fault
/// that is, and so its fate.
fn not_begun(e: EngineError, at: &str) -> (End, Settle, Option<String>, Halt) {
    let refused = |e: &dyn std::fmt::Display| {
        (
            End::Refused,
            Settle::Term,
            Some(format!("{at}: refused: {e}; terminated")),
            Halt::No,
        )
    };
    let stop = |e: &dyn std::fmt::Display| {
        (
            End::NotRun,
            Settle::Nack(Duration::ZERO),
            Some(format!("{at}: not run: {e}; put back")),
            Halt::Stop(e.to_string()),
        )
    };
    match e {
        // The message's own fault: the same answer every time.
        EngineError::Operation(_) | EngineError::Refused(_) => refused(&e),
        EngineError::Policy(_) => (
            End::PolicyFailed,
            Settle::Term,
            Some(format!("{at}: {e}; terminated")),
            Halt::No,
        ),
        EngineError::Store(ref s) => match s.class() {
            // Ownership moved on: another member's now, or this one's
            // under the new epoch.
            _ if matches!(s, StoreError::StaleEpoch { .. }) => (
                End::StaleEpoch,
                Settle::Nack(RETRY_DELAY),
                Some(format!("{at}: {e}")),
                Halt::No,
            ),
            // The outage budget is spent (each claim rode it out).
            ErrorClass::Unavailable => (
                End::NotRun,
                Settle::Nack(RETRY_DELAY),
                Some(format!("{at}: not run: {e}")),
                Halt::Outage,
            ),
            // The request itself: sent again, refused again.
            ErrorClass::Refused => refused(&e),
            // A lost race on the record: looked at again when delivered
            // again.
            ErrorClass::Conflict => (
                End::NotRun,
                Settle::Nack(RETRY_DELAY),
                Some(format!("{at}: not run: {e}")),
                Halt::No,
            ),
            // A store that cannot be opened, a schema this idem does not
            // know, a corrupt row: waiting changes nothing, and no message
            // is to blame.
            ErrorClass::Failed => stop(&e),
        },
        EngineError::Fenced(_) => (
            End::NotRun,
            Settle::Nack(RETRY_DELAY),
            Some(format!("{at}: not run: {e}")),
            Halt::No,
        ),
        // The consumer's policy may not claim here: no message can run.
        EngineError::Unregistered(_) => stop(&e),
    }
}
