//! The job runner: every operation of a batch job through an effect, at
//! most once per key. This is `idem run` as a library, for a service that
//! runs its nightly job in-process instead of through the CLI. Its run loop
//! (`dispatch.rs`, fed through `feed.rs`) is also the loop of
//! [`crate::consume`], fed by a broker.
//!
//! A run, in order:
//!
//! 1. reads every operation from its [`OperationSource`] and derives its
//!    key (a refusal stops the run before it changes anything:
//!    [`JobError::Derive`]; or, with [`JobOptions::skip_invalid`], the
//!    entry is reported and skipped), keeping its derivation;
//! 2. takes the job lease when asked ([`JobLeaseOptions`]; another live
//!    run holding it stops this one: [`JobError::JobLeaseHeld`]) and
//!    renews it while the run goes on;
//! 3. with [`Ownership`], registers the membership, keeps the operations
//!    this worker owns, and makes every claim carry the ownership epoch;
//! 4. reads the operations again (each checked against the first read,
//!    whose derivation it takes: the policy is called once per operation,
//!    but for one waited for behind a peer, derived again when it begins),
//!    claims those that can start now (free concurrency
//!    slots, up to the claim batch) in one store call, runs each one's
//!    [`Effect`] in a task of its own while heartbeating its claim, and records the ends
//!    in batches (every end that arrived while the previous store call was
//!    in flight, none held back to wait for more);
//!    A store call that fails because the store is unavailable (a
//!    restart, a fail-over, killed connections, a full disk) is tried
//!    again with backoff for up to [`JobOptions::store_outage`]; past it
//!    the run stops taking operations ([`Summary::outage`]);
//! 5. with [`JobOptions::wait_for_peers`], waits for the operations another
//!    live run holds and reports how they ended;
//! 6. releases the job lease and returns the [`Summary`].
//!
//! Memory: between the two reads the runner keeps about 150 bytes per
//! operation it runs (its derivation) and one bit per other one, and while
//! it runs, only the operations in flight and a
//! bounded queue of the next ones; a job of millions of operations from a
//! file ([`OperationSource`]) runs in constant memory.
//!
//! A re-run executes only what had not completed; whatever it finds
//! completed is replayed, never run again. The job lease is an efficiency
//! measure only: correctness rests on each operation's own claim, fence
//! and epoch.
//!
//! ```no_run
//! # async fn charge(op: &idem::core::Operation, key: &str, fence: u64) -> Result<Vec<u8>, String> { Ok(Vec::new()) }
//! # async fn example(engine: idem::engine::Engine, ops: Vec<idem::core::Operation>) -> Result<(), idem::job::JobError> {
//! use std::num::NonZeroUsize;
//! use idem::core::Operation;
//! use idem::engine::{ExecContext, Failed};
//! use idem::job::{EffectOutcome, JobOptions, JobRunner};
//! use idem::store::Outcome;
//!
//! let options = JobOptions {
//!     concurrency: NonZeroUsize::new(8).unwrap(),
//!     ..JobOptions::default()
//! };
//! let summary = JobRunner::new(engine, options)
//!     // A closure's arguments need their types: `run` is generic over
//!     // any `Effect`.
//!     .run(ops, |op: Operation, ctx: ExecContext| async move {
//!         // Hand the key and the fence to the payment provider.
//!         match charge(&op, &ctx.key, ctx.fence).await {
//!             Ok(receipt) => EffectOutcome::Completed(Outcome::new(0, receipt)),
//!             Err(why) => EffectOutcome::Failed(Failed {
//!                 retryable: true,
//!                 outcome: Outcome::error(502, why),
//!             }),
//!         }
//!     })
//!     .await?;
//! assert!(summary.all_completed());
//! # Ok(())
//! # }
//! ```

pub(crate) mod dispatch;
mod effect;
mod error;
pub(crate) mod event;
pub(crate) mod fate;
pub(crate) mod feed;
mod finisher;
mod lease;
mod one;
pub(crate) mod outage;
pub(crate) mod ownership;
mod peers;
mod plan;
mod progress;
mod slot;
mod source;
mod summary;

use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;

use idem_core::Operation;

use crate::engine::Engine;

pub use effect::{Effect, EffectOutcome, Performed, run_effect};
pub use error::JobError;
pub use event::JobEvent;
pub use lease::JobLeaseOptions;
pub use one::{begin_riding_out, open_riding_out, run_effect_riding_out};
pub use ownership::Ownership;
pub use plan::JobPlan;
pub use source::{ListSource, OperationSource, SourceItem, SourceRead, Unreadable};
pub use summary::{End, Outage, Summary};

/// How a [`JobRunner`] runs its operations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobOptions {
    /// How many effects run at once (default 1).
    pub concurrency: NonZeroUsize,
    /// Most operations claimed in one store call (one round trip on
    /// PostgreSQL, one commit on SQLite) when that many can start at once;
    /// 1 claims one at a time (default 64).
    pub claim_batch: NonZeroUsize,
    /// Most ends recorded in one store call; 1 records each on its own
    /// (default 64).
    pub finish_batch: NonZeroUsize,
    /// Partitioned ownership: run only this worker's share (default: every
    /// operation, no epoch).
    pub ownership: Option<Ownership>,
    /// Take this job lease first (default: none).
    pub job_lease: Option<JobLeaseOptions>,
    /// Skip the entries that are not valid operations (unparsable, or the
    /// policy refuses or fails to derive them), reporting each as a
    /// [`JobEvent::Skipped`], and run the rest; by default one stops the
    /// run before anything is claimed.
    pub skip_invalid: bool,
    /// Wait for the operations another live run holds, up to this long for
    /// each (`Duration::MAX`: as long as the holder's claim stays live),
    /// then begin them again and report how they ended (a replay, a
    /// failure, or what the policy decides for a claim that lapsed). By
    /// default (`None`) they end [`End::InProgress`] at once.
    pub wait_for_peers: Option<Duration>,
    /// How long the store may be unavailable (unreachable, restarting,
    /// its disk full) before the run gives up on it (default 60 s: a
    /// managed PostgreSQL fails over within that). Meanwhile every failed
    /// store call is tried again with backoff and the effects already
    /// running go on; past it the run stops taking operations, counts the
    /// rest [`End::NotRun`] and says so in [`Summary::outage`]. Zero gives
    /// up at the first failure.
    pub store_outage: Duration,
}

/// [`JobOptions::store_outage`]'s default.
pub const DEFAULT_STORE_OUTAGE: Duration = Duration::from_secs(60);

impl Default for JobOptions {
    fn default() -> Self {
        const BATCH: NonZeroUsize = NonZeroUsize::new(64).expect("64 is not zero");
        JobOptions {
            concurrency: NonZeroUsize::MIN,
            claim_batch: BATCH,
            finish_batch: BATCH,
            ownership: None,
            job_lease: None,
            skip_invalid: false,
            wait_for_peers: None,
            store_outage: DEFAULT_STORE_OUTAGE,
        }
    }
}

/// Runs a job's operations through an [`Effect`], at most once per key.
#[derive(Clone)]
pub struct JobRunner {
    engine: Engine,
    options: JobOptions,
    observer: event::Observer,
}

impl std::fmt::Debug for JobRunner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobRunner")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl JobRunner {
    /// A runner claiming through `engine` (its policy, store and options;
    /// with [`JobOptions::ownership`] the runner adds the ownership epoch).
    pub fn new(engine: Engine, options: JobOptions) -> Self {
        JobRunner {
            engine,
            options,
            observer: dispatch::escaping(event::log_events()),
        }
    }

    /// Calls `observer` with every [`JobEvent`] (each operation's end, as
    /// it happens, and warnings), from the job's tasks. Without one, notes
    /// and warnings go to `tracing`.
    pub fn on_event(mut self, observer: impl Fn(JobEvent<'_>) + Send + Sync + 'static) -> Self {
        // Escaped once here: the run's notes and warnings carry what the
        // operations hold.
        self.observer = dispatch::escaping(Arc::new(observer));
        self
    }

    /// Runs `operations` through `effect`; see the [module](self) for the
    /// order of things. An error means the run stopped before claiming
    /// anything; single operations' failures are counted in the summary.
    /// Positions in errors and events are indexes into `operations`.
    pub async fn run<E: Effect>(
        &self,
        operations: Vec<Operation>,
        effect: E,
    ) -> Result<Summary, JobError> {
        self.run_source(ListSource::new(operations), effect).await
    }

    /// [`JobRunner::run`] over operations read from `source` (twice: see
    /// the [module](self)), holding each operation's derivation, never the
    /// operation.
    pub async fn run_source<S: OperationSource, E: Effect>(
        &self,
        source: S,
        effect: E,
    ) -> Result<Summary, JobError> {
        // The first read is file I/O and policy calls: a blocking thread's.
        let (engine, options) = (self.engine.clone(), self.options.clone());
        let observer = self.observer.clone();
        // A large error ends the run, once: its size costs nothing.
        #[allow(clippy::result_large_err)]
        let planned = tokio::task::spawn_blocking(move || {
            JobPlan::with(
                &|op| engine.derive(op),
                Arc::new(source),
                &options,
                &observer,
            )
        })
        .await
        .map_err(|e| JobError::Source(format!("checking the operations failed: {e}")))??;
        self.run_planned(planned, effect).await
    }

    /// Runs what [`JobPlan::read`] read (the operations read again from
    /// its source, each checked against the first read): for a caller that
    /// derives every operation before it opens the store, as `idem run`
    /// does. Steps 2 to 6 of the [module](self).
    pub async fn run_planned<E: Effect>(
        &self,
        planned: JobPlan,
        effect: E,
    ) -> Result<Summary, JobError> {
        let JobPlan {
            source,
            plan,
            ownership,
        } = planned;
        if ownership != self.options.ownership {
            return Err(JobError::Source(
                "the plan was read for another share of the operations than this runner's \
                 (JobOptions::ownership)"
                    .into(),
            ));
        }
        let store = self.engine.store().clone();
        // The job lease is taken only once every operation is derived: bad
        // input never holds it.
        let job_lease = match &self.options.job_lease {
            Some(options) => Some((lease::acquire(&store, options).await?, options.ttl)),
            None => None,
        };
        // As `idem run` always did, a failure here leaves a job lease just
        // taken to expire by itself rather than releasing it.
        let engine = ownership::joined(&self.engine, self.options.ownership.as_ref()).await?;
        let engine = Arc::new(engine);
        (self.observer)(JobEvent::Started {
            operations: plan.to_run(),
        });
        let heartbeat = job_lease
            .as_ref()
            .map(|(lease, ttl)| lease::spawn_heartbeat(&store, lease, *ttl, self.observer.clone()));
        let limits = dispatch::Limits {
            concurrency: self.options.concurrency.get(),
            claim_batch: self.options.claim_batch.get(),
            finish_batch: self.options.finish_batch.get(),
            wait_for_peers: self.options.wait_for_peers,
            store_outage: self.options.store_outage,
            // A job's operations are read and kept by the plan.
            run: None,
            ownership: None,
            hold_until_recorded: false,
        };
        let (not_owned, skipped, planned) = (plan.not_owned(), plan.skipped(), plan.to_run());
        // Enough queued for two full batches read ahead: what is already
        // done is settled a batch per read, whatever the concurrency (a
        // replay holds no slot), and the next batch is ready when the last
        // is taken. No more is held.
        let queue = 2 * limits.claim_batch;
        let (fed, feeder) = feed::start(source, plan, queue);
        let never = std::future::pending();
        let (mut ran, taken) = dispatch::run_all(
            engine.clone(),
            fed,
            Arc::new(effect),
            limits,
            &self.observer,
            never,
        )
        .await;
        // Every answer the run got into the attempt log before it reports.
        engine.flush_log().await;
        // Whatever stopped the second read or the run (a store outage past
        // its budget), what was planned and never taken was not run.
        let never_taken = (planned as u64).saturating_sub(taken);
        ran.not_run += never_taken;
        let read_again = feeder
            .await
            .unwrap_or_else(|e| Err(format!("reading the operations failed: {e}")));
        if let Err(why) = read_again {
            (self.observer)(JobEvent::Warning(&format!(
                "{why}; {never_taken} operations not run"
            )));
        }
        if let Some(heartbeat) = heartbeat {
            heartbeat.abort();
        }
        if let Some((lease, _)) = &job_lease {
            lease::release(&store, lease, &self.observer).await;
        }
        Ok(Summary {
            not_owned,
            skipped,
            ..ran
        })
    }
}
