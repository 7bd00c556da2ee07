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
//! | sent to review (an expired claim the policy will not re-run) | forwarded to [`ConsumeOptions::review_to`] if set, then acknowledged: it waits in review (`idem review`) |
//! | rejected, conflict (the key names another operation), not an operation, a policy failure | terminated (never delivered again) and warned about |
//!
//! From the claim to the end of the effect, a delivery is reported in
//! progress as often as the source asks ([`MessageSource::progress_every`]:
//! JetStream's `+WPI`), so a long effect keeps its delivery.
//!
//! The messages of one fetch are derived and claimed together, in one store
//! call, and the ends that arrive together are recorded in one, as a job
//! batches them: a claim made so waits for no slot (a fetch takes only as
//! many messages as there are free slots).
//!
//! The store's outages are ridden out within a budget, as a job does
//! (`job::settle_riding_out`, and the job's finisher for the ends); past it
//! the consumer stops fetching, settles what it holds, and says why.
//!
//! `answer.rs` says what the engine's answer means for a delivery;
//! `source.rs` is the port a broker implements; `nats.rs` (feature `nats`)
//! JetStream's, `amqp.rs` (feature `amqp`) RabbitMQ's.

#[cfg(feature = "amqp")]
pub mod amqp;
mod answer;
#[cfg(feature = "nats")]
pub mod nats;
mod source;

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use idem_core::Operation;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

pub use source::{Delivery, MessageSource, SourceError};

use crate::engine::{Engine, EngineError, FirstClaim, ToClaim};
use crate::job::outage::{self, Backoff};
use crate::job::{
    Effect, End, Finisher, JobError, JobEvent, Outage, Ownership, Summary, join_ownership,
    settle_riding_out,
};
use answer::{Settle, answer};

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
    /// Where a message whose lapsed claim the policy sends to review is
    /// forwarded (a subject on NATS, a queue on RabbitMQ) before it is
    /// acknowledged, with headers naming its record (`idem-namespace`,
    /// `idem-key`), why (`idem-reason`) and where it came from
    /// (`idem-delivery`). `None`: acknowledged; it waits in `idem review`
    /// either way.
    pub review_to: Option<String>,
    /// Partitioned ownership, as `idem run --shard` has it: the consumer
    /// joins the group's membership, every claim carries its epoch (a
    /// consumer deposed by a new membership stops: [`Summary::deposed`]), and a
    /// message whose partition another member owns is put off
    /// ([`MessageSource::not_owned_delay`]) for the broker to deliver to
    /// another consumer. That needs a broker that gives a message put back
    /// to any of its consumers, as JetStream does; RabbitMQ was measured
    /// handing it back to the consumer that returned it (so `idem consume`
    /// refuses `--shard` there: a queue per shard is the way).
    pub ownership: Option<Ownership>,
}

impl Default for ConsumeOptions {
    fn default() -> Self {
        ConsumeOptions {
            concurrency: 1,
            outage_budget: Duration::from_secs(60),
            stop_after: None,
            stop_when_idle: None,
            max_redelivery_delay: Duration::from_secs(300),
            review_to: None,
            ownership: None,
        }
    }
}

/// How long one fetch waits for a first message.
const FETCH_WAIT: Duration = Duration::from_secs(1);

/// How long a delivery whose effect failed retryably waits before it is
/// delivered again.
const RETRY_DELAY: Duration = Duration::from_secs(1);

/// How long a message another member owns is put off on a broker that
/// keeps it meanwhile (JetStream): the broker, not the consumer, chooses
/// who gets it next, so it may come back here; the delay bounds that churn
/// while its owner is away.
pub const NOT_OWNED_DELAY: Duration = Duration::from_secs(1);

/// Consumes `source` until `shutdown` resolves (or a stop option is met, or
/// an outage outlasts the budget): each delivery's operation through
/// `engine` and `effect`, settled as the module docs say. The summary counts
/// deliveries by how they ended (`skipped`: not an operation, terminated;
/// `not_owned`: another member's, put off); a message delivered again is
/// counted again. `observer` hears every end and warning, as a job's does.
/// The error: joining the ownership group failed (nothing was fetched).
pub async fn consume<E: Effect>(
    engine: Arc<Engine>,
    source: &mut dyn MessageSource,
    effect: Arc<E>,
    options: ConsumeOptions,
    shutdown: impl Future<Output = ()>,
    observer: Arc<dyn Fn(JobEvent<'_>) + Send + Sync>,
) -> Result<Summary, JobError> {
    let engine = match &options.ownership {
        Some(ownership) => {
            let mut engine_options = engine.options().clone();
            engine_options.ownership = Some(join_ownership(engine.store(), ownership).await?);
            Arc::new(engine.reconfigured(engine_options))
        }
        None => engine,
    };
    let mut shutdown = std::pin::pin!(shutdown);
    let permits = Arc::new(Semaphore::new(options.concurrency.max(1)));
    let finisher = Arc::new(Finisher::start(
        engine.clone(),
        options.concurrency.max(1),
        options.outage_budget,
    ));
    let mut tasks: JoinSet<(Counted, bool)> = JoinSet::new();
    let mut told_not_owned = false;
    let mut summary = Summary::default();
    let mut taken: u64 = 0;
    let mut idle_since = Instant::now();
    let mut broker_down: Option<Instant> = None;
    let progress_every = source.progress_every();
    let not_owned_delay = source.not_owned_delay();
    // Shared by every delivery's task (the membership is a list).
    let task_options = Arc::new(options.clone());
    loop {
        while let Some(joined) = tasks.try_join_next() {
            settle_task(&mut summary, joined, &observer);
        }
        if summary.outage.is_some() || options.stop_after.is_some_and(|n| taken >= n) {
            break;
        }
        // Deposed: the membership moved on, so every claim from here would
        // be refused; what this consumer had is another member's now.
        if summary.stale_epoch > 0 && options.ownership.is_some() {
            observer(JobEvent::Warning(
                "the ownership group's membership moved on (another consumer joined with \
                 another list): this consumer is deposed; stopped",
            ));
            summary.deposed = true;
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
        let owned = options.ownership.as_ref().map(|o| (o, not_owned_delay));
        let prepared = prepare(&engine, &deliveries, owned).await;
        if !told_not_owned && prepared.iter().any(|p| matches!(p, Prepared::NotOwned(_))) {
            told_not_owned = true;
            observer(JobEvent::Warning(&format!(
                "messages owned by other members are put off ({not_owned_delay:?} each) for the \
                 broker to deliver elsewhere: run a consumer for every member, or give each its \
                 own subject or queue"
            )));
        }
        for ((delivery, prepared), permit) in deliveries.into_iter().zip(prepared).zip(held) {
            let (engine, finisher) = (engine.clone(), finisher.clone());
            let (effect, observer) = (effect.clone(), observer.clone());
            let options = task_options.clone();
            tasks.spawn(async move {
                let settled = settle(
                    &engine,
                    &finisher,
                    &*effect,
                    delivery,
                    prepared,
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
    source.give_back().await;
    while let Some(joined) = tasks.join_next().await {
        settle_task(&mut summary, joined, &observer);
    }
    Ok(summary)
}

/// How a delivery counts in the summary.
enum Counted {
    End(End),
    /// Not an operation: terminated.
    Skipped,
    /// Another member's: put off.
    NotOwned,
}

/// Counts a task's end; a task that stopped on an outage past the budget
/// stops the consumer.
fn settle_task(
    summary: &mut Summary,
    joined: Result<(Counted, bool), tokio::task::JoinError>,
    observer: &Arc<dyn Fn(JobEvent<'_>) + Send + Sync>,
) {
    match joined {
        Ok((end, outage)) => {
            match end {
                Counted::End(end) => summary.count(end),
                Counted::Skipped => summary.skipped += 1,
                Counted::NotOwned => summary.not_owned += 1,
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

/// One delivery, made ready in its fetch's batch.
enum Prepared {
    /// Not an operation: why.
    Unreadable(String),
    /// The policy could not derive its key.
    Underived(Box<(Operation, EngineError)>),
    /// Its partition is another member's: put off this long.
    NotOwned(Duration),
    /// Claimed in the batch (`first`), or to be claimed on its own (`None`:
    /// the batch's store call failed; the claim is sent again within the
    /// outage budget).
    Ready {
        item: Box<ToClaim>,
        first: Option<Box<FirstClaim>>,
    },
}

/// Reads and derives each delivery's operation and claims them all in one
/// store call ([`Engine::claim_batch`]'s; what a claim finds is settled in
/// the delivery's own task).
async fn prepare(
    engine: &Engine,
    deliveries: &[Box<dyn Delivery>],
    ownership: Option<(&Ownership, Duration)>,
) -> Vec<Prepared> {
    let limits = engine.policy().limits().operation;
    let mut prepared = Vec::with_capacity(deliveries.len());
    let mut items = Vec::new();
    for delivery in deliveries {
        let op = match Operation::from_slice(delivery.body(), &limits) {
            Ok(op) => op,
            Err(e) => {
                prepared.push(Prepared::Unreadable(e.to_string()));
                continue;
            }
        };
        match engine.derive(&op) {
            Ok(keyed)
                if let Some((o, delay)) = ownership
                    && !idem_core::ownership::owns(&keyed.partition, &o.member, &o.members) =>
            {
                prepared.push(Prepared::NotOwned(delay))
            }
            Ok(keyed) => {
                items.push(engine.to_claim((op, keyed)));
                prepared.push(Prepared::Ready {
                    item: Box::new(items[items.len() - 1].clone()),
                    first: None,
                });
            }
            Err(e) => prepared.push(Prepared::Underived(Box::new((op, e)))),
        }
    }
    if items.is_empty() {
        return prepared;
    }
    // On a failure of the whole call each claim is sent again on its own,
    // as the same request (a claim that committed unseen is its own), and
    // rides out an outage there.
    let claimed = match engine.claim_batch_keeping(items).await {
        Ok(claimed) => claimed,
        Err((e, _)) => {
            tracing::warn!(error = %e, "a batch of claims failed; each is claimed alone");
            return prepared;
        }
    };
    let mut claimed = claimed.into_iter();
    for slot in &mut prepared {
        if let Prepared::Ready { first, .. } = slot {
            *first = claimed.next().map(Box::new);
        }
    }
    prepared
}

/// Settles one delivery made ready by [`prepare`]: its operation begun
/// (riding out an outage), run and recorded; the delivery acknowledged,
/// put off or terminated. How it counts, and whether the store was
/// unavailable past the budget.
#[allow(clippy::too_many_arguments)]
async fn settle<E: Effect>(
    engine: &Engine,
    finisher: &Finisher,
    effect: &E,
    delivery: Box<dyn Delivery>,
    prepared: Prepared,
    options: &ConsumeOptions,
    progress_every: Option<Duration>,
    observer: &Arc<dyn Fn(JobEvent<'_>) + Send + Sync>,
) -> (Counted, bool) {
    let budget = options.outage_budget;
    let warn = |text: String| observer(JobEvent::Warning(&text));
    let (op, first) = match prepared {
        Prepared::Unreadable(e) => {
            warn(format!(
                "{}: not an operation ({e}); terminated",
                delivery.describe()
            ));
            if let Err(e) = delivery.term().await {
                warn(format!("{}: {e}", delivery.describe()));
            }
            return (Counted::Skipped, false);
        }
        Prepared::NotOwned(delay) => {
            if let Err(e) = delivery.nack(delay).await {
                warn(format!("{}: {e}", delivery.describe()));
            }
            return (Counted::NotOwned, false);
        }
        Prepared::Underived(failed) => {
            let (op, e) = *failed;
            (op, Err(e))
        }
        Prepared::Ready { item, first } => (item.operation().clone(), Ok((item, first))),
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
        let (end, then, note, outage) =
            answer(finisher, effect, op, begun, options, &*delivery).await;
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
        (end, then, note, outage)
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
    (Counted::End(end), outage)
}

/// [`Delivery::forward`], sent again while it fails, for up to `budget`.
async fn forward_riding_out(
    delivery: &dyn Delivery,
    to: &str,
    headers: &[(&'static str, String)],
    budget: Duration,
    warn: &impl Fn(String),
) -> Result<(), SourceError> {
    let mut backoff = Backoff::new(budget);
    loop {
        let error = match delivery.forward(to, headers).await {
            Ok(()) => return Ok(()),
            Err(e) => e,
        };
        match backoff.after_failure().await {
            outage::Next::Again { first } => {
                if first {
                    warn(format!("{error}; trying again for up to {budget:?}"));
                }
            }
            outage::Next::GiveUp(_) => return Err(error),
        }
    }
}
