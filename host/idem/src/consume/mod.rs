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
//! A consumer is the job's run loop (`job::dispatch`) fed by a broker: the
//! messages of one fetch are derived and claimed together, in one store
//! call, and each slot records its own end (the store's group commit puts
//! the ends that arrive together in one commit); a claim made so waits for
//! no slot (a fetch takes only as many messages as there are free slots). The store's outages are ridden
//! out within a budget, as a job does; past it (or the broker's) the
//! consumer stops fetching, settles what it holds, and says why.
//!
//! `fetch.rs` is the loop's feed (fetching, the broker's outages, stopping
//! when idle); `settle.rs` says what an operation's fate means for its
//! delivery and settles it. The brokers themselves, and the port each
//! implements, are [`crate::broker`]'s.

mod fetch;
mod settle;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use idem_core::RunContext;

use crate::broker::MessageSource;
use crate::engine::Engine;
use crate::job::dispatch::{self, Limits};
use crate::job::ownership::{self, Ownership};
use crate::job::{Effect, JobError, JobEvent, Summary};

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
    let engine = Arc::new(ownership::joined(&engine, options.ownership.as_ref()).await?);
    let concurrency = options.concurrency.max(1);
    let limits = Limits {
        concurrency,
        // A fetch takes no more than the free slots, claimed together.
        claim_batch: concurrency,
        // Each slot records its own end: a slot is held until then, so a
        // batching task between the slots and the store was a hop there and
        // back per message, and the store's group commit already puts the
        // ends that arrive together in one commit (measured: less CPU a
        // message on every broker, docs/benchmarks.md).
        finish_batch: 1,
        wait_for_peers: None,
        store_outage: options.outage_budget,
        run: options.run.clone(),
        ownership: options.ownership.clone(),
        hold_until_recorded: true,
    };
    // What the feed and the deliveries say carries what publishers sent.
    let observer = dispatch::escaping(observer);
    let feed = fetch::Fetching::new(source, &options, observer.clone());
    let (summary, _) = dispatch::run_all(engine, feed, effect, limits, &observer, shutdown).await;
    Ok(summary)
}
