//! One delivery, from what [`super::prepare`] made of it to its
//! settlement: its operation begun (riding out an outage), run and
//! recorded, forwarded to review when the policy sends it there, and the
//! delivery acknowledged, put off or terminated as [`super::answer`] says.

use std::sync::Arc;
use std::time::Duration;

use super::answer::{Settle, settle_of};
use super::{ConsumeOptions, Counted, Delivery, Prepared, SourceError};
use crate::engine::{Begin, Engine};
use crate::job::fate::{self, Halt};
use crate::job::outage;
use crate::job::{Effect, End, Finisher, JobEvent, run_effect_recording, settle_riding_out};

/// Settles one delivery made ready by [`super::prepare`]: its operation begun
/// (riding out an outage), run and recorded; the delivery acknowledged,
/// put off or terminated. How it counts, and whether the consumer goes
/// on.
#[allow(clippy::too_many_arguments)]
pub(super) async fn settle<E: Effect>(
    engine: &Engine,
    finisher: &Finisher,
    effect: &E,
    delivery: Box<dyn Delivery>,
    prepared: Prepared,
    options: &ConsumeOptions,
    progress_every: Option<Duration>,
    observer: &Arc<dyn Fn(JobEvent<'_>) + Send + Sync>,
) -> (Counted, Halt) {
    let budget = options.outage_budget;
    let warn = |text: String| observer(JobEvent::Warning(&text));
    let (op, key, first) = match prepared {
        // Refused for good: the same bytes are refused every time.
        Prepared::Unreadable(e) => {
            if let Err(e) = delivery.term().await {
                warn(format!("{}: {e}", delivery.describe()));
            }
            observer(JobEvent::Ended {
                end: End::Refused,
                note: Some(&format!(
                    "{}: refused: not an operation ({e}); terminated",
                    delivery.describe()
                )),
            });
            return (Counted::End(End::Refused), Halt::No);
        }
        Prepared::NotOwned(delay) => {
            if let Err(e) = delivery.nack(delay).await {
                warn(format!("{}: {e}", delivery.describe()));
            }
            return (Counted::NotOwned, Halt::No);
        }
        Prepared::Underived(failed) => {
            let (op, e) = *failed;
            (op, None, Err(e))
        }
        Prepared::Ready { item, first } => {
            let key = item.request().key.digest;
            (item.operation().clone(), Some(key), Ok((item, first)))
        }
    };
    let work = async {
        let begun = match first {
            Err(e) => Err(e),
            Ok((item, first)) => {
                settle_riding_out(engine, *item, first.map(|f| *f), budget, |e| {
                    warn(format!(
                        "the store is unavailable ({e}); trying again for up to {budget:?}"
                    ))
                })
                .await
            }
        };
        let fate = match begun {
            Ok(Begin::Execute(execution)) => {
                let (key, lease) = (execution.key_hex(), execution.lease());
                // The end goes to the consumer's finisher, which records
                // the ends that arrive together in one store call.
                let ran = run_effect_recording(
                    effect,
                    op,
                    execution,
                    async |execution, ending, outcome| {
                        finisher
                            .record(execution.into_finish(ending, outcome))
                            .await
                    },
                )
                .await;
                fate::of_execution(ran, &key, lease)
            }
            other => fate::of_answer(other, key),
        };
        let (end, then, note, halt) = settle_of(engine, fate, options, &delivery.describe()).await;
        // Forwarded while the delivery is still reported in progress. A
        // forward that fails past the budget is not tried again (delivered
        // again, the record in review is answered, not forwarded): the
        // delivery is acknowledged and the warning names it; the record
        // waits in `idem review`, its operation shown there.
        let then = match then {
            Settle::Review(headers) => {
                let to = options.review_to.as_deref().unwrap_or_default();
                if let Err(e) = forward_riding_out(&*delivery, to, &headers, budget, &warn).await {
                    warn(format!(
                        "{e}; not forwarded, past the outage budget: acknowledged, its record \
                         waits in idem review"
                    ));
                }
                Settle::Ack
            }
            then => then,
        };
        (end, then, note, halt)
    };
    let (end, then, note, halt) = match progress_every {
        None => work.await,
        // From the claim to the end of the effect, the broker is told the
        // delivery is being worked on before its redelivery timer runs out
        // (a JetStream `+WPI`).
        Some(every) => {
            let mut work = std::pin::pin!(work);
            let mut tick = tokio::time::interval(every);
            tick.tick().await;
            loop {
                tokio::select! {
                    out = &mut work => break out,
                    _ = tick.tick() => {
                        if let Err(e) = delivery.in_progress().await {
                            warn(format!("{}: {e}", delivery.describe()));
                        }
                    }
                }
            }
        }
    };
    let settled = match then {
        Settle::Ack => delivery.ack().await,
        Settle::Nack(delay) => delivery.nack(delay).await,
        Settle::Term => delivery.term().await,
        Settle::Review(_) => unreachable!("forwarded and acknowledged above"),
    };
    if let Err(e) = settled {
        // Delivered again, it is answered from the record.
        warn(format!("{}: {e}", delivery.describe()));
    }
    observer(JobEvent::Ended {
        end,
        note: note.as_deref(),
    });
    (Counted::End(end), halt)
}

/// [`Delivery::forward`], sent again while it fails, for up to `budget`.
pub(super) async fn forward_riding_out(
    delivery: &dyn Delivery,
    to: &str,
    headers: &[(&'static str, String)],
    budget: Duration,
    warn: &impl Fn(String),
) -> Result<(), SourceError> {
    // Every failure to forward is the broker's: tried again.
    outage::riding_out(
        budget,
        || delivery.forward(to, headers),
        |_| true,
        |e| warn(format!("{e}; trying again for up to {budget:?}")),
    )
    .await
}
