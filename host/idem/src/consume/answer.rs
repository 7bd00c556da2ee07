//! What an operation's fate (`job::fate`, the same for every source) means
//! for a delivery: acknowledged, put off, terminated or forwarded to
//! review (the table in the module docs of [`super`]).
//!
//! Every delivery has one of three fates: run (acknowledged once its end
//! is recorded, or put off while a take-over is the policy's to decide);
//! put off because the store or the broker is unavailable, and only then;
//! or refused for good (terminated) with a note naming what was wrong.
//! What no message could get past (a command that cannot start, a policy
//! not registered, a store that failed for good) stops the consumer
//! instead ([`Halt::Stop`]): putting the message off would loop for ever,
//! terminating it would throw away a good message.

use std::time::Duration;

use idem_store::RecordState;

use super::{ConsumeOptions, RETRY_DELAY};
use crate::engine::Engine;
use crate::job::End;
use crate::job::fate::{Delay, Fate, Halt, Then};

/// What happens to a delivery once the engine has answered.
pub(super) enum Settle {
    Ack,
    Nack(Duration),
    Term,
    /// Forwarded to the review destination with these headers, then
    /// acknowledged.
    Review(Vec<(&'static str, String)>),
}

/// How `fate` ends for the delivery `at` (its description): the end, what
/// to do with the delivery, a note naming the delivery, and whether the
/// consumer goes on.
pub(super) async fn settle_of(
    engine: &Engine,
    fate: Fate,
    options: &ConsumeOptions,
    at: &str,
) -> (End, Settle, Option<String>, Halt) {
    let Fate {
        end,
        note,
        then,
        halt,
    } = fate;
    let mut suffix = "";
    let settle = match then {
        Then::Done => Settle::Ack,
        Then::Later(delay) => {
            let delay = match delay {
                Delay::Now => {
                    suffix = "; put back";
                    Duration::ZERO
                }
                Delay::Retry => RETRY_DELAY,
                Delay::Hint(ms) => ms
                    .map_or(RETRY_DELAY, Duration::from_millis)
                    .clamp(RETRY_DELAY, options.max_redelivery_delay),
                Delay::Lease(lease) => lease.min(options.max_redelivery_delay),
            };
            Settle::Nack(delay)
        }
        Then::Review { key, reason } => match &options.review_to {
            None => Settle::Ack,
            Some(_) => Settle::Review(vec![
                ("idem-namespace", key.namespace.clone()),
                ("idem-key", key.digest.to_string()),
                ("idem-reason", reason),
                ("idem-delivery", at.to_string()),
            ]),
        },
        // A duplicate of a record waiting in review: its request is there
        // for a person already (the delivery that found the claim lapsed
        // was acknowledged, and forwarded with --review-to). Acknowledged
        // on every broker: terminating it would put the same request in a
        // dead-letter queue too.
        Then::Rejected { key } => match engine.store().records().get(&key).await {
            Ok(Some(view)) if view.record.state == RecordState::OutcomeUnknown => {
                let note = note.map(|n| {
                    format!("{at}: {n}; a duplicate of a record that waits in review: acknowledged")
                });
                return (end, Settle::Ack, note, halt);
            }
            // Asked again once the store is back.
            Err(e) if e.is_unavailable() => {
                let note = Some(format!("{at}: not run: {e}"));
                return (End::NotRun, Settle::Nack(RETRY_DELAY), note, Halt::No);
            }
            _ => {
                suffix = "; terminated";
                Settle::Term
            }
        },
        Then::Refused => {
            suffix = "; terminated";
            Settle::Term
        }
    };
    let note = note.map(|n| format!("{at}: {n}{suffix}"));
    (end, settle, note, halt)
}
