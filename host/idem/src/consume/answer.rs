//! What the engine's answer for one delivery means for the delivery: its
//! end (counted and shown), and whether it is acknowledged, put off or
//! terminated (the table in the module docs of [`super`]).

use std::time::Duration;

use idem_core::Operation;
use idem_store::{RecordState, StoreError};

use super::{ConsumeOptions, Delivery, RETRY_DELAY};
use crate::engine::{Begin, EngineError};
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

/// How `begun` ends for a delivery: the end, what to do with the delivery,
/// a note, and whether the store was unavailable past the budget.
pub(super) async fn answer<E: Effect>(
    finisher: &Finisher,
    effect: &E,
    op: Operation,
    begun: Result<Begin, EngineError>,
    options: &ConsumeOptions,
    delivery: &dyn Delivery,
) -> (End, Settle, Option<String>, bool) {
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
                Ok(Performed::Completed) => (End::Executed, Settle::Ack, None, false),
                Ok(Performed::Failed {
                    retryable: false, ..
                }) => (End::Failed, Settle::Ack, None, false),
                Ok(Performed::Failed { .. }) => {
                    (End::Failed, Settle::Nack(RETRY_DELAY), None, false)
                }
                Ok(Performed::NotStarted { reason }) => (
                    End::Failed,
                    Settle::Nack(RETRY_DELAY),
                    Some(format!("{at}: {reason}")),
                    false,
                ),
                // The claim lapses after its lease; delivered again then,
                // the policy decides.
                Ok(Performed::Unknown { reason }) => (
                    End::Unknown,
                    Settle::Nack(lease.min(options.max_redelivery_delay)),
                    Some(format!("{at}: {reason}; outcome unknown")),
                    false,
                ),
                // Deposed: the record is its taker's to settle.
                Err(EngineError::Fenced(e)) => (
                    End::Fenced,
                    Settle::Ack,
                    Some(format!("{at}: deposed while running: {e}")),
                    false,
                ),
                Err(e) => (
                    End::Unknown,
                    Settle::Nack(lease.min(options.max_redelivery_delay)),
                    Some(format!("{at}: {e}")),
                    e.is_store_unavailable(),
                ),
            }
        }
        Ok(Begin::Replay(r)) if r.state == RecordState::Completed => {
            (End::Replayed, Settle::Ack, None, false)
        }
        Ok(Begin::Replay(_)) => (End::ReplayedFailure, Settle::Ack, None, false),
        Ok(Begin::InProgress { retry_after_ms, .. }) => (
            End::InProgress,
            Settle::Nack(later(retry_after_ms)),
            None,
            false,
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
                false,
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
            false,
        ),
        Ok(Begin::Rejected { reason, .. }) => (
            End::Rejected,
            Settle::Term,
            Some(format!("{at}: rejected: {reason}; terminated")),
            false,
        ),
        Ok(Begin::Conflict { key, reason, .. }) => (
            End::Conflict,
            Settle::Term,
            Some(format!(
                "{at}: conflict on key {}: {reason}; terminated",
                key.digest
            )),
            false,
        ),
        Err(EngineError::Store(e @ StoreError::StaleEpoch { .. })) => (
            End::StaleEpoch,
            Settle::Nack(RETRY_DELAY),
            Some(format!("{at}: {e}")),
            false,
        ),
        Err(e @ EngineError::Policy(_)) => (
            End::PolicyFailed,
            Settle::Term,
            Some(format!("{at}: {e}; terminated")),
            false,
        ),
        // Nothing started: delivered again.
        Err(e) => {
            let outage = e.is_store_unavailable();
            (
                End::NotRun,
                Settle::Nack(RETRY_DELAY),
                Some(format!("{at}: not run: {e}")),
                outage,
            )
        }
    }
}
