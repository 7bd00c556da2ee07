//! What an operation's fate (`job::fate`, the same for every source) means
//! for its delivery, and the delivery settled so: acknowledged, put off,
//! terminated or forwarded to review (the table in the module docs of
//! [`super`]).
//!
//! Every delivery has one of three fates: run (acknowledged once its end
//! is recorded, or put off while a take-over is the policy's to decide);
//! put off because the store or the broker is unavailable, and only then;
//! or refused for good (terminated) with a note naming what was wrong.
//! What no message could get past (a command that cannot start, a policy
//! not registered, a store that failed for good) stops the consumer
//! instead ([`Halt::Stop`]): putting the message off would loop for ever,
//! terminating it would throw away a good message.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use idem_store::RecordState;

use super::{ConsumeOptions, RETRY_DELAY};
use crate::broker::{Delivery, SourceError};
use crate::engine::Engine;
use crate::job::End;
use crate::job::JobEvent;
use crate::job::event::Observer;
use crate::job::fate::{Delay, Fate, Halt, Then};
use crate::job::feed::{Settled, Ticket};
use crate::job::outage;

/// What every delivery of one consumer settles by.
pub(super) struct Settling {
    pub(super) options: ConsumeOptions,
    pub(super) not_owned_delay: Duration,
    /// Whether the advice about other members' messages was given.
    pub(super) told_not_owned: AtomicBool,
    pub(super) observer: Observer,
}

impl Settling {
    fn warn(&self, text: &str) {
        (self.observer)(JobEvent::Warning(text));
    }
}

/// One delivery, as the run loop's ticket for its operation.
pub(super) struct Delivered {
    delivery: Box<dyn Delivery>,
    settling: Arc<Settling>,
    /// Whether its acknowledgement (or nack, or termination) has begun:
    /// the run's progress keeper reports from another task, and a report
    /// after it would reach a broker that no longer holds the delivery for
    /// this consumer (Redis answers "not yours", and a warning would say
    /// so).
    settled: tokio::sync::Mutex<bool>,
}

impl Delivered {
    pub(super) fn new(delivery: Box<dyn Delivery>, settling: Arc<Settling>) -> Self {
        Delivered {
            delivery,
            settling,
            settled: tokio::sync::Mutex::new(false),
        }
    }

    fn warn_failed(&self, e: SourceError) {
        self.settling
            .warn(&format!("{}: {e}", self.delivery.describe()));
    }
}

/// What happens to a delivery once its fate is known.
enum Settle {
    Ack,
    Nack(Duration),
    Term,
    /// Forwarded to the review destination with these headers, then
    /// acknowledged.
    Review(Vec<(&'static str, String)>),
}

impl Ticket for Delivered {
    fn origin(&self) -> Option<String> {
        Some(self.delivery.describe())
    }

    async fn in_progress(&self) {
        let settled = self.settled.lock().await;
        if *settled {
            return;
        }
        if let Err(e) = self.delivery.in_progress().await {
            self.warn_failed(e);
        }
    }

    async fn settle(&self, engine: &Engine, fate: Fate) -> Settled {
        let settling = &*self.settling;
        let at = self.delivery.describe();
        let (end, then, note, halt) = settle_of(engine, fate, settling, &at).await;
        // A forward that fails past the budget is not tried again
        // (delivered again, the record in review is answered, not
        // forwarded): the delivery is acknowledged and the warning names
        // it; the record waits in `idem review`, its operation shown there.
        let then = match then {
            Settle::Review(headers) => {
                let to = settling.options.review_to.as_deref().unwrap_or_default();
                let budget = settling.options.outage_budget;
                if let Err(e) = outage::riding_out(
                    budget,
                    || self.delivery.forward(to, &headers),
                    // Every failure to forward is the broker's: tried again.
                    |_| true,
                    |e| settling.warn(&format!("{e}; trying again for up to {budget:?}")),
                )
                .await
                {
                    settling.warn(&format!(
                        "{e}; not forwarded, past the outage budget: acknowledged, its record \
                         waits in idem review"
                    ));
                }
                Settle::Ack
            }
            then => then,
        };
        // No report from here on (one under way is waited for).
        *self.settled.lock().await = true;
        let settled = match then {
            Settle::Ack | Settle::Review(_) => self.delivery.ack().await,
            Settle::Nack(delay) => self.delivery.nack(delay).await,
            Settle::Term => self.delivery.term().await,
        };
        if let Err(e) = settled {
            // Delivered again, it is answered from the record.
            self.warn_failed(e);
        }
        Settled { end, note, halt }
    }
}

/// How `fate` ends for the delivery `at` (its description): the end, what
/// to do with the delivery, a note naming the delivery, and whether the
/// consumer goes on.
async fn settle_of(
    engine: &Engine,
    fate: Fate,
    settling: &Settling,
    at: &str,
) -> (End, Settle, Option<String>, Halt) {
    let options = &settling.options;
    let Fate {
        end,
        note,
        then,
        mut halt,
    } = fate;
    // Deposed: the membership moved on, so every claim from here would be
    // refused; what this consumer had is another member's now.
    if end == End::StaleEpoch && options.ownership.is_some() {
        halt = Halt::Deposed;
    }
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
                Delay::Elsewhere => {
                    if !settling.told_not_owned.swap(true, Ordering::Relaxed) {
                        settling.warn(&format!(
                            "messages owned by other members are put off ({:?} each) for the \
                             broker to deliver elsewhere: run a consumer for every member, or \
                             give each its own subject or queue",
                            settling.not_owned_delay
                        ));
                    }
                    settling.not_owned_delay
                }
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
