//! Exactly-once effects for messages from a broker: every broker delivers
//! at least once, so a consumer that crashed after its effect and before its
//! ack gets the message again. [`consume`] runs each message (an operation
//! in idem's operation JSON) through the engine exactly as `idem run` runs
//! a line, and settles the delivery only once its end is recorded:
//!
//! | what the engine answered | the delivery |
//! |---|---|
//! | execute, and the end (completed, or failed for good) is recorded | acknowledged |
//! | execute, failed retryably (recorded), or could not start | negatively acknowledged: delivered again, and the policy decides (normally a take-over) |
//! | execute, outcome unknown (the effect's process was killed) | negatively acknowledged after the lease: the policy decides then |
//! | replay of what is done | acknowledged, without an effect |
//! | in progress elsewhere | negatively acknowledged, delivered again after the delay the policy's decision gives |
//! | sent to review (an expired claim the policy will not re-run) | acknowledged: it waits in review (`idem review`) |
//! | rejected, conflict (the key names another operation), not an operation, a policy failure | terminated (never delivered again) and warned about |
//!
//! From the claim to the end of the effect, a delivery is reported in
//! progress as often as the source asks ([`MessageSource::progress_every`]:
//! JetStream's `+WPI`), so a long effect keeps its delivery.
//!
//! The store's outages are ridden out within a budget, as a job does
//! (`job::begin_riding_out`, `job::run_effect_riding_out`); past it the
//! consumer stops fetching, settles what it holds, and says why.
//!
//! `source.rs` is the port a broker implements; `nats.rs` (feature `nats`)
//! JetStream's, `amqp.rs` (feature `amqp`) RabbitMQ's.

#[cfg(feature = "amqp")]
pub mod amqp;
#[cfg(feature = "nats")]
pub mod nats;
mod source;

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use idem_core::Operation;
use idem_store::{RecordState, StoreError};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

pub use source::{Delivery, MessageSource, SourceError};

use crate::engine::{Begin, Engine, EngineError};
use crate::job::{
    Effect, End, JobEvent, Outage, Performed, Summary, begin_riding_out, run_effect_riding_out,
};

/// How a consumer runs.
#[derive(Debug, Clone)]
pub struct ConsumeOptions {
    /// Messages whose effects run at once.
    pub concurrency: usize,
    /// How long the store (or the broker) may be unavailable before the
    /// consumer gives up on it and stops (see `job::JobOptions::store_outage`).
    pub outage_budget: Duration,
    /// Stop after settling this many deliveries.
    pub stop_after: Option<u64>,
    /// Stop once no message has come for this long.
    pub stop_when_idle: Option<Duration>,
    /// The longest a delivery is put off when its operation is in progress
    /// elsewhere (the policy's suggestion is used up to this).
    pub max_redelivery_delay: Duration,
}

impl Default for ConsumeOptions {
    fn default() -> Self {
        ConsumeOptions {
            concurrency: 1,
            outage_budget: Duration::from_secs(60),
            stop_after: None,
            stop_when_idle: None,
            max_redelivery_delay: Duration::from_secs(300),
        }
    }
}

/// How long one fetch waits for a first message.
const FETCH_WAIT: Duration = Duration::from_secs(1);

/// How long a delivery whose effect failed retryably waits before it is
/// delivered again.
const RETRY_DELAY: Duration = Duration::from_secs(1);

/// Consumes `source` until `shutdown` resolves (or a stop option is met, or
/// an outage outlasts the budget): each delivery's operation through
/// `engine` and `effect`, settled as the module docs say. The summary counts
/// deliveries by how they ended (`skipped`: not an operation, terminated);
/// a message delivered again is counted again. `observer`
/// hears every end and warning, as a job's does.
pub async fn consume<E: Effect>(
    engine: Arc<Engine>,
    source: &mut dyn MessageSource,
    effect: Arc<E>,
    options: ConsumeOptions,
    shutdown: impl Future<Output = ()>,
    observer: Arc<dyn Fn(JobEvent<'_>) + Send + Sync>,
) -> Summary {
    let mut shutdown = std::pin::pin!(shutdown);
    let permits = Arc::new(Semaphore::new(options.concurrency.max(1)));
    let mut tasks: JoinSet<(Option<End>, bool)> = JoinSet::new();
    let mut summary = Summary::default();
    let mut taken: u64 = 0;
    let mut idle_since = Instant::now();
    let mut broker_down: Option<Instant> = None;
    let progress_every = source.progress_every();
    loop {
        while let Some(joined) = tasks.try_join_next() {
            settle_task(&mut summary, joined, &observer);
        }
        if summary.outage.is_some() || options.stop_after.is_some_and(|n| taken >= n) {
            break;
        }
        let permit = tokio::select! {
            permit = permits.clone().acquire_owned() => permit.expect("the semaphore is never closed"),
            () = &mut shutdown => break,
        };
        let mut held = vec![permit];
        let room = options
            .stop_after
            .map_or(usize::MAX, |n| (n - taken) as usize);
        while held.len() < room.min(options.concurrency)
            && let Ok(permit) = permits.clone().try_acquire_owned()
        {
            held.push(permit);
        }
        let fetched = tokio::select! {
            fetched = source.fetch(held.len(), FETCH_WAIT) => fetched,
            () = &mut shutdown => break,
        };
        let deliveries = match fetched {
            Ok(deliveries) => {
                broker_down = None;
                deliveries
            }
            Err(e) => {
                let since = *broker_down.get_or_insert_with(Instant::now);
                if since.elapsed() > options.outage_budget {
                    observer(JobEvent::Warning(&format!(
                        "{e}; the broker was unavailable past the outage budget: stopped"
                    )));
                    summary.outage = Some(Outage {
                        lasted_ms: since.elapsed().as_millis() as u64,
                        error: e.to_string(),
                    });
                    break;
                }
                observer(JobEvent::Warning(&format!("{e}; trying again")));
                tokio::time::sleep(FETCH_WAIT).await;
                continue;
            }
        };
        if deliveries.is_empty() {
            if options
                .stop_when_idle
                .is_some_and(|idle| idle_since.elapsed() >= idle)
                && tasks.is_empty()
                && source.held() == 0
            {
                break;
            }
            continue;
        }
        idle_since = Instant::now();
        taken += deliveries.len() as u64;
        for (delivery, permit) in deliveries.into_iter().zip(held) {
            let (engine, effect, observer) = (engine.clone(), effect.clone(), observer.clone());
            let options = options.clone();
            tasks.spawn(async move {
                let settled = settle(
                    &engine,
                    &*effect,
                    delivery,
                    &options,
                    progress_every,
                    &observer,
                )
                .await;
                drop(permit);
                settled
            });
        }
    }
    // Stop fetching; what runs finishes, is recorded and settled.
    while let Some(joined) = tasks.join_next().await {
        settle_task(&mut summary, joined, &observer);
    }
    summary
}

/// Counts a task's end; a task that stopped on an outage past the budget
/// stops the consumer.
fn settle_task(
    summary: &mut Summary,
    joined: Result<(Option<End>, bool), tokio::task::JoinError>,
    observer: &Arc<dyn Fn(JobEvent<'_>) + Send + Sync>,
) {
    match joined {
        Ok((end, outage)) => {
            match end {
                Some(end) => summary.count(end),
                None => summary.skipped += 1,
            }
            if outage && summary.outage.is_none() {
                summary.outage = Some(Outage {
                    lasted_ms: 0,
                    error: "the store was unavailable past the outage budget".into(),
                });
            }
        }
        Err(e) => {
            tracing::error!(error = %e, "message task failed");
            observer(JobEvent::Ended {
                end: End::Unknown,
                note: None,
            });
            summary.count(End::Unknown);
        }
    }
}

/// What happens to a delivery once the engine has answered.
enum Settle {
    Ack,
    Nack(Duration),
    Term,
}

/// Runs one delivery's operation and settles the delivery: how it ended
/// (`None`: not an operation, terminated), and whether the store was
/// unavailable past the budget.
async fn settle<E: Effect>(
    engine: &Engine,
    effect: &E,
    delivery: Box<dyn Delivery>,
    options: &ConsumeOptions,
    progress_every: Option<Duration>,
    observer: &Arc<dyn Fn(JobEvent<'_>) + Send + Sync>,
) -> (Option<End>, bool) {
    let budget = options.outage_budget;
    let warn = |text: String| observer(JobEvent::Warning(&text));
    let limits = engine.policy().limits().operation;
    let op = match Operation::from_slice(delivery.body(), &limits) {
        Ok(op) => op,
        Err(e) => {
            warn(format!(
                "{}: not an operation ({e}); terminated",
                delivery.describe()
            ));
            if let Err(e) = delivery.term().await {
                warn(format!("{}: {e}", delivery.describe()));
            }
            return (None, false);
        }
    };
    let work = async {
        let begun = begin_riding_out(engine, &op, budget, |e| {
            warn(format!(
                "the store is unavailable ({e}); trying again for up to {budget:?}"
            ))
        })
        .await;
        answer(engine, effect, op, begun, options, &*delivery).await
    };
    let (end, then, note, outage) = match progress_every {
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
    };
    if let Err(e) = settled {
        // Delivered again, it is answered from the record.
        warn(format!("{}: {e}", delivery.describe()));
    }
    observer(JobEvent::Ended {
        end,
        note: note.as_deref(),
    });
    (Some(end), outage)
}

/// How `begun` ends for a delivery: the end, what to do with the delivery,
/// a note, and whether the store was unavailable past the budget.
async fn answer<E: Effect>(
    engine: &Engine,
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
            let ran =
                run_effect_riding_out(effect, engine, op, execution, options.outage_budget).await;
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
        }) => (
            End::SentToReview,
            Settle::Ack,
            Some(format!("{at}: sent key {} to review: {reason}", key.digest)),
            false,
        ),
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
