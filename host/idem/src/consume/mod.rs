//! Exactly-once effects for messages from a broker: every broker delivers
//! at least once, so a consumer that crashed after its effect and before its
//! ack gets the message again. [`consume`] runs each message (an operation
//! in idem's operation JSON) through the engine exactly as `idem run` runs
//! a line, and settles the delivery only once its end is recorded:
//!
//! | what the engine answered | the delivery |
//! |---|---|
//! | execute, and the end (completed, or failed for good) is recorded | acknowledged |
//! | execute, failed retryably (recorded) | negatively acknowledged: delivered again, and the policy decides (normally a take-over) |
//! | execute, outcome unknown (the effect's process was killed) | negatively acknowledged after the lease: the policy decides then |
//! | replay of what is done | acknowledged, without an effect |
//! | in progress elsewhere | negatively acknowledged, delivered again after the delay the policy's decision gives |
//! | sent to review (an expired claim the policy will not re-run) | forwarded to [`ConsumeOptions::review_to`] if set, then acknowledged: it waits in review (`idem review`) |
//! | rejected, a duplicate of a record waiting in review (outcome unknown) | acknowledged, with a line: the request waits in review already |
//! | rejected, conflict (the key names another operation), a policy failure | terminated (never delivered again) and warned about |
//! | refused before a claim: not an operation, a value idem does not accept (a NUL, too large), the policy refuses to derive a key, the store refuses the request | terminated, one line naming why, counted `refused` |
//! | no message can run: the command cannot start, the policy is not registered in the namespace, the store failed for good | put back at once, and the consumer stops saying why ([`Summary::stopped`]) |
//!
//! Only an unavailable store or broker puts a message off without an end
//! (ridden out within the outage budget); nothing a message holds does.
//! On RabbitMQ a termination is a rejection without requeue, so a queue
//! with a dead-letter exchange keeps what was refused.
//!
//! Every note and warning is escaped ([`idem_core::text::escaped`]) before
//! the observer hears it: message ids, subjects, field values and reasons
//! come from publishers, and may hold escape sequences or new lines.
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
//! `settle.rs` takes one delivery from its claim to its settlement;
//! `source.rs` is the port a broker implements; `nats.rs` (feature `nats`)
//! JetStream's, `amqp.rs` (feature `amqp`) RabbitMQ's.

#[cfg(feature = "amqp")]
pub mod amqp;
mod answer;
#[cfg(feature = "nats")]
pub mod nats;
mod settle;
mod source;

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use idem_core::{Operation, RunContext};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

pub use source::{Delivery, MessageSource, SourceError};

use crate::engine::{Engine, EngineError, FirstClaim, ToClaim};
use crate::job::fate::Halt;
use crate::job::{
    Effect, End, Finisher, JobError, JobEvent, Outage, Ownership, Summary, join_ownership,
};
use settle::settle;

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
    /// The run a message's operation belongs to when it names none of its
    /// own (`idem consume --run-id/--trigger/--attempt`): recorded with
    /// its claim, as `idem run`'s are. An operation's own `run` is kept (its
    /// publisher said which run it is).
    pub run: Option<RunContext>,
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
            run: None,
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
/// an outage outlasts the budget, or no message can run): each delivery's
/// operation through `engine` and `effect`, settled as the module docs say.
/// The summary counts deliveries by how they ended (`refused`: refused for
/// good, terminated; `not_owned`: another member's, put off); a message
/// delivered again is counted again. `observer` hears every end and
/// warning, as a job's does, escaped. With
/// [`ConsumeOptions::stop_when_idle`], the consumer stops only once the
/// broker holds no delivery of its name unacknowledged (a crashed
/// predecessor's come back after the broker's redelivery wait), or, past
/// that wait, says how many it leaves ([`Summary::unacknowledged`]).
/// The error: joining the ownership group failed (nothing was fetched).
pub async fn consume<E: Effect>(
    engine: Arc<Engine>,
    source: &mut dyn MessageSource,
    effect: Arc<E>,
    options: ConsumeOptions,
    shutdown: impl Future<Output = ()>,
    observer: Arc<dyn Fn(JobEvent<'_>) + Send + Sync>,
) -> Result<Summary, JobError> {
    let observer = escaping(observer);
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
    let mut tasks: JoinSet<(Counted, Halt)> = JoinSet::new();
    let mut told_not_owned = false;
    let mut summary = Summary::default();
    let mut taken: u64 = 0;
    let mut idle_since = Instant::now();
    let mut broker_down: Option<Instant> = None;
    let mut told_unacknowledged = false;
    let progress_every = source.progress_every();
    let not_owned_delay = source.not_owned_delay();
    // Shared by every delivery's task (the membership is a list).
    let task_options = Arc::new(options.clone());
    loop {
        while let Some(joined) = tasks.try_join_next() {
            settle_task(&mut summary, joined, &observer);
        }
        if summary.outage.is_some()
            || summary.stopped.is_some()
            || options.stop_after.is_some_and(|n| taken >= n)
        {
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
            if let Some(idle) = options.stop_when_idle
                && idle_since.elapsed() >= idle
                && tasks.is_empty()
                && source.held() == 0
                && idle_stop(
                    source,
                    idle_since.elapsed().saturating_sub(idle),
                    &mut summary,
                    &mut told_unacknowledged,
                    &observer,
                )
                .await
            {
                break;
            }
            continue;
        }
        idle_since = Instant::now();
        taken += deliveries.len() as u64;
        let owned = options.ownership.as_ref().map(|o| (o, not_owned_delay));
        let prepared = prepare(&engine, &deliveries, owned, options.run.as_ref()).await;
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

/// `observer`, hearing every note and warning escaped: they carry what
/// publishers sent (message ids, subjects, field values, reasons).
fn escaping(
    observer: Arc<dyn Fn(JobEvent<'_>) + Send + Sync>,
) -> Arc<dyn Fn(JobEvent<'_>) + Send + Sync> {
    use idem_core::text::escaped;
    Arc::new(move |event| match event {
        JobEvent::Ended {
            end,
            note: Some(note),
        } => observer(JobEvent::Ended {
            end,
            note: Some(&escaped(note)),
        }),
        JobEvent::Warning(text) => observer(JobEvent::Warning(&escaped(text))),
        other => observer(other),
    })
}

/// Whether a consumer idle for long enough stops now: when the broker
/// holds no delivery of its name unacknowledged, or can tell none (a
/// broker that gives a closed channel's deliveries back at once); else,
/// once `overdue` (idle past `--stop-when-idle`) outlasts the broker's
/// redelivery wait, saying what it leaves. Meanwhile the deliveries given
/// to a consumer that crashed come back and are run.
async fn idle_stop(
    source: &mut dyn MessageSource,
    overdue: Duration,
    summary: &mut Summary,
    told: &mut bool,
    observer: &Arc<dyn Fn(JobEvent<'_>) + Send + Sync>,
) -> bool {
    let wait = source.redelivery_wait();
    let n = match source.unacknowledged().await {
        Ok(None | Some(0)) => return true,
        Ok(Some(n)) => n,
        Err(e) => {
            observer(JobEvent::Warning(&format!(
                "{e}; cannot tell whether deliveries are left unacknowledged"
            )));
            return false;
        }
    };
    if overdue > wait + FETCH_WAIT {
        observer(JobEvent::Warning(&format!(
            "stopped when idle, leaving {n} messages of {} unsettled (given to another \
             consumer of its name, alive or crashed, and not back within {wait:?}, or not yet \
             delivered): the broker delivers them again",
            source.describe()
        )));
        summary.unacknowledged = n;
        return true;
    }
    if !*told {
        *told = true;
        observer(JobEvent::Warning(&format!(
            "idle, but {n} messages of {} are unsettled (given to another consumer of its \
             name, or to one that crashed, or not yet delivered): waiting up to {wait:?} for \
             them",
            source.describe()
        )));
    }
    false
}

/// How a delivery counts in the summary.
enum Counted {
    End(End),
    /// Another member's: put off.
    NotOwned,
}

/// Counts a task's end; a task that stopped on an outage past the budget,
/// or found that no message can run, stops the consumer.
fn settle_task(
    summary: &mut Summary,
    joined: Result<(Counted, Halt), tokio::task::JoinError>,
    observer: &Arc<dyn Fn(JobEvent<'_>) + Send + Sync>,
) {
    match joined {
        Ok((end, halt)) => {
            match end {
                Counted::End(end) => summary.count(end),
                Counted::NotOwned => summary.not_owned += 1,
            }
            match halt {
                Halt::No => {}
                Halt::Outage if summary.outage.is_none() => {
                    summary.outage = Some(Outage {
                        lasted_ms: 0,
                        error: "the store was unavailable past the outage budget".into(),
                    });
                }
                Halt::Outage => {}
                Halt::Stop(why) => {
                    if summary.stopped.is_none() {
                        observer(JobEvent::Warning(&format!("{why}: stopped")));
                        summary.stopped = Some(why);
                    }
                }
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

/// Reads and derives each delivery's operation (given `run` when it names
/// none) and claims them all in one store call ([`Engine::claim_batch`]'s;
/// what a claim finds is settled in the delivery's own task).
async fn prepare(
    engine: &Engine,
    deliveries: &[Box<dyn Delivery>],
    ownership: Option<(&Ownership, Duration)>,
    run: Option<&RunContext>,
) -> Vec<Prepared> {
    let limits = engine.policy().limits().operation;
    let mut prepared = Vec::with_capacity(deliveries.len());
    let mut items = Vec::new();
    for delivery in deliveries {
        let op = match Operation::from_slice(delivery.body(), &limits) {
            Ok(mut op) => {
                if op.run.is_none() {
                    op.run = run.cloned();
                }
                op
            }
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
