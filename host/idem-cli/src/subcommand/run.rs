//! `idem run`: the nightly-job mode. Every operation of a JSONL file through
//! the command, at most once per key; a re-run executes only what had not
//! completed.
//!
//! Partitioned ownership (`--shard I/N`, `--members … --member NAME`): the
//! run registers the membership under its group, gets the group's epoch,
//! and processes only the operations whose partition it owns (rendezvous
//! hashing, `idem_core::ownership`). Every claim carries the epoch; once
//! the membership changes the store refuses it (`stale_epoch` in the
//! summary), so a worker deposed while paused cannot start an effect.
//!
//! `--job-lease NAME`: a job-level lease taken first; when another live run
//! holds it, the run exits at once with [`exit::JOB_LEASE_HELD`]. Efficiency
//! only: nothing above depends on it.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;
use idem::engine::{Begin, Claimed, Engine, EngineError};
use idem_core::{KeyedDerivation, Operation};
use idem_store::{JobLease, JobLeaseAcquire, RecordState, Store, StoreError};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use tokio::sync::Semaphore;

use crate::exit::{self, Failure, engine_failure};
use crate::finisher::Finisher;
use crate::input::read_op_bytes;
use crate::policy_args::PolicyArgs;
use crate::run_flags::{OwnershipFlags, RunFlags};
use crate::store_args::{StoreArgs, runtime};
use crate::user_command::{CommandSpec, Recorded, run_and_record};

/// `idem run`'s flags.
#[derive(Args, Debug)]
pub struct RunArgs {
    #[command(flatten)]
    pub policy: PolicyArgs,
    #[command(flatten)]
    pub store: StoreArgs,
    /// The operations, one JSON object per line (`-` for standard input).
    #[arg(long, value_name = "OPS.jsonl")]
    pub ops: PathBuf,
    /// How many operations run at once.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub concurrency: usize,
    /// Claims up to N operations in one store call (one round trip on
    /// PostgreSQL, one commit on SQLite) when that many can start at once
    /// (see --concurrency); 1 claims one at a time. Only operations about
    /// to start are claimed: a claim's lease runs from the claim.
    #[arg(long, value_name = "N", default_value_t = 64)]
    pub claim_batch: usize,
    /// Records up to N operations' ends in one store call: every end that
    /// arrived while the previous call was in flight (none is held back to
    /// wait for more); 1 records each on its own.
    #[arg(long, value_name = "N", default_value_t = 64)]
    pub finish_batch: usize,
    #[command(flatten)]
    pub run: RunFlags,
    #[command(flatten)]
    pub ownership: OwnershipFlags,
    /// Print the summary as JSON.
    #[arg(long)]
    pub json: bool,
    /// The command run for each operation; it reads the operation on stdin.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// How each operation ended.
#[derive(Debug, Default, Clone, Serialize, PartialEq, Eq)]
pub struct Summary {
    /// The command ran and succeeded.
    pub executed: u64,
    /// The effect had already happened: its outcome was replayed.
    pub replayed: u64,
    /// Another holder is running it.
    pub in_progress: u64,
    /// The key was used for a different request.
    pub conflicts: u64,
    /// The policy rejected the duplicate (e.g. an unknown outcome in review).
    pub rejected: u64,
    /// The command ran and failed, or a permanent failure was replayed.
    pub failed: u64,
    /// This run was deposed while the command ran; its result not recorded.
    pub fenced: u64,
    /// The command was killed: outcome unknown.
    pub unknown: u64,
    /// The store refused the claim: the membership changed since this run
    /// registered it, so this run may no longer own the partition. Not run.
    pub stale_epoch: u64,
    /// Owned by another worker (`--shard`, `--members`): not this run's.
    pub not_owned: u64,
}

#[derive(Clone, Copy)]
enum Ended {
    Executed,
    Replayed,
    ReplayedFailure,
    InProgress,
    Conflict,
    Rejected,
    Failed,
    Fenced,
    Unknown,
    StaleEpoch,
}

/// Runs `idem run`.
pub fn run(args: RunArgs) -> Result<u8, Failure> {
    let policy = args.policy.load()?;
    let bytes = read_op_bytes(&args.ops)?;
    let text = String::from_utf8(bytes)
        .map_err(|_| Failure::input(format!("{} is not UTF-8", args.ops.display())))?;
    // Read and derive every operation before running any: bad input stops
    // the run before it changes anything.
    let limits = policy.limits().operation;
    let mut ops = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let mut op = Operation::from_json(line, &limits)
            .map_err(|e| Failure::input(format!("{} line {}: {e}", args.ops.display(), i + 1)))?;
        args.run.apply(&mut op);
        ops.push((i + 1, op));
    }
    if args.concurrency == 0 {
        return Err(Failure::input("--concurrency must be at least 1"));
    }
    if args.claim_batch == 0 {
        return Err(Failure::input("--claim-batch must be at least 1"));
    }
    if args.finish_batch == 0 {
        return Err(Failure::input("--finish-batch must be at least 1"));
    }
    let membership = args.ownership.membership().map_err(Failure::input)?;
    if args.ownership.job_lease.is_some() && args.ownership.job_lease_ttl.is_zero() {
        return Err(Failure::input("--job-lease-ttl must be more than 0"));
    }
    let group = args
        .ownership
        .group
        .clone()
        .unwrap_or_else(|| policy.info().namespace.clone());
    runtime()?.block_on(async move {
        let store = args.store.open().await?;
        let mut options = args.run.engine_options();
        let mut derived = Vec::with_capacity(ops.len());
        {
            // Deriving needs no store: a throwaway engine, then the real one
            // once the ownership epoch is known.
            let engine = Engine::new(policy.clone(), store.clone(), options.clone());
            for (line, op) in ops {
                let keyed = engine.derive(&op).map_err(|e| match e {
                    EngineError::Refused(r) => Failure {
                        code: exit::POLICY_REFUSED,
                        message: format!("{} line {line}: the policy refused it: {r}", args.ops.display()),
                    },
                    other => engine_failure(other),
                })?;
                derived.push((op, keyed));
            }
        }
        // Every line is read and derived before the job lease is taken:
        // bad input never holds the lease.
        let job = match &args.ownership.job_lease {
            Some(name) => Some(take_job_lease(&store, name, &args).await?),
            None => None,
        };
        let mut not_owned = 0;
        if let Some((members, me)) = &membership {
            let joined = store.join_membership(&group, members).await.map_err(|e| {
                Failure::input(format!("cannot register the membership of group {group}: {e}"))
            })?;
            tracing::info!(group = %group, epoch = joined.epoch, member = %me, "joined");
            // Ownership from the membership the store returned: the one the
            // epoch stands for.
            let before = derived.len();
            derived.retain(|(_, keyed)| {
                idem_core::ownership::owns(&keyed.partition, me, &joined.members)
            });
            not_owned = (before - derived.len()) as u64;
            options.ownership = Some(joined.token());
        }
        let engine = Engine::new(policy, store.clone(), options);
        let heartbeat = job.as_ref().map(|lease| spawn_job_heartbeat(&store, lease, &args));
        let ran = run_all(Arc::new(engine), derived, &args).await;
        if let Some(heartbeat) = heartbeat {
            heartbeat.abort();
        }
        if let Some(lease) = &job
            && let Err(e) = store.release_job_lease(&lease.job, lease.fence).await
        {
            // Harmless: the lease ends by itself, and nothing depends on it.
            eprintln!("idem: could not release job lease {}: {e}", lease.job);
        }
        let summary = Summary { not_owned, ..ran };
        if args.json {
            println!("{}", serde_json::to_string(&summary).unwrap_or_default());
        } else {
            println!(
                "executed {}, replayed {}, in progress {}, conflicts {}, rejected {}, failed {}, fenced {}, unknown {}",
                summary.executed,
                summary.replayed,
                summary.in_progress,
                summary.conflicts,
                summary.rejected,
                summary.failed,
                summary.fenced,
                summary.unknown
            );
            if membership.is_some() {
                println!(
                    "ownership: group {group}, not owned {}, stale epoch {}",
                    summary.not_owned, summary.stale_epoch
                );
            }
        }
        let all_done = summary.in_progress
            + summary.conflicts
            + summary.rejected
            + summary.failed
            + summary.fenced
            + summary.unknown
            + summary.stale_epoch
            == 0;
        Ok(if all_done {
            exit::SUCCESS
        } else {
            exit::INCOMPLETE
        })
    })
}

/// Who holds a job lease, for the message another run prints.
fn job_holder(args: &RunArgs) -> String {
    let holder = idem_store::Holder::this_process();
    match &args.run.run_id {
        Some(run) => format!("{}:{} run {run}", holder.host, holder.pid),
        None => format!("{}:{}", holder.host, holder.pid),
    }
}

/// Takes the job lease, or ends the run with [`exit::JOB_LEASE_HELD`] when
/// another live run holds it.
async fn take_job_lease(
    store: &Arc<dyn Store>,
    name: &str,
    args: &RunArgs,
) -> Result<JobLease, Failure> {
    let ttl = args.ownership.job_lease_ttl;
    match store.acquire_job_lease(name, &job_holder(args), ttl).await {
        Ok(JobLeaseAcquire::Acquired(lease)) => Ok(lease),
        Ok(JobLeaseAcquire::Held {
            current,
            remaining_ms,
        }) => Err(Failure {
            code: exit::JOB_LEASE_HELD,
            message: format!(
                "job {name} is already running ({}, lease fence {}, {} ms left); this run did nothing",
                current.holder, current.fence, remaining_ms
            ),
        }),
        Err(e) => Err(Failure::input(format!("cannot take job lease {name}: {e}"))),
    }
}

/// Renews the job lease every third of its length. A lost lease only costs
/// efficiency (another run may start the same work, and the per-operation
/// claims keep that safe), so the run goes on and says so.
fn spawn_job_heartbeat(
    store: &Arc<dyn Store>,
    lease: &JobLease,
    args: &RunArgs,
) -> tokio::task::JoinHandle<()> {
    let (store, job, fence) = (store.clone(), lease.job.clone(), lease.fence);
    let ttl = args.ownership.job_lease_ttl;
    tokio::spawn(async move {
        let every = (ttl / 3).max(std::time::Duration::from_millis(10));
        loop {
            tokio::time::sleep(every).await;
            if let Err(e) = store.heartbeat_job_lease(&job, fence, ttl).await {
                eprintln!(
                    "idem: job lease {job} lost ({e}); carrying on, correctness does not depend on it"
                );
                return;
            }
        }
    })
}

async fn run_all(
    engine: Arc<Engine>,
    ops: Vec<(Operation, KeyedDerivation)>,
    args: &RunArgs,
) -> Summary {
    let progress = if std::io::stderr().is_terminal() {
        let bar = ProgressBar::new(ops.len() as u64);
        bar.set_style(
            ProgressStyle::with_template("{bar:40} {pos}/{len} {per_sec} eta {eta} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        bar
    } else {
        ProgressBar::hidden()
    };
    let permits = Arc::new(Semaphore::new(args.concurrency));
    let mut tasks = tokio::task::JoinSet::new();
    let command = Arc::new(args.command.clone());
    let flags = Arc::new(args.run.clone());
    let finisher = Arc::new(Finisher::start(engine.clone(), args.finish_batch));
    let mut summary = Summary::default();
    let mut pending = ops.into_iter().peekable();
    while pending.peek().is_some() {
        // Count what has finished so far (the progress bar moves).
        while let Some(joined) = tasks.try_join_next() {
            count(&mut summary, &progress, joined);
        }
        // Wait for one free slot, then take every other free one (up to the
        // batch size): the operations that can start now are claimed
        // together, in one store call.
        let mut held = vec![
            permits
                .clone()
                .acquire_owned()
                .await
                .expect("the semaphore is never closed"),
        ];
        while held.len() < args.claim_batch {
            match permits.clone().try_acquire_owned() {
                Ok(permit) => held.push(permit),
                Err(_) => break,
            }
        }
        let batch: Vec<_> = pending.by_ref().take(held.len()).collect();
        held.truncate(batch.len());
        let size = batch.len();
        let claimed = match engine.claim_batch(batch).await {
            Ok(claimed) => claimed,
            Err(e) => {
                // None of these started; a re-run finds whatever the store
                // may have claimed before failing (and the policy decides).
                eprintln!("idem: claiming a batch of {size} failed: {e}");
                summary.unknown += size as u64;
                progress.inc(size as u64);
                continue;
            }
        };
        for (claimed, permit) in claimed.into_iter().zip(held) {
            let (engine, command, flags) = (engine.clone(), command.clone(), flags.clone());
            let finisher = finisher.clone();
            tasks.spawn(async move {
                let ended = one(&engine, &finisher, claimed, &command, &flags).await;
                drop(permit);
                vec![ended]
            });
        }
    }
    while let Some(joined) = tasks.join_next().await {
        count(&mut summary, &progress, joined);
    }
    progress.finish_and_clear();
    summary
}

/// Adds a finished task's operations to the summary.
fn count(
    summary: &mut Summary,
    progress: &ProgressBar,
    joined: Result<Vec<Ended>, tokio::task::JoinError>,
) {
    let ends = joined.unwrap_or_else(|e| {
        tracing::error!(error = %e, "operation task failed");
        vec![Ended::Unknown]
    });
    for ended in ends {
        let counter = match ended {
            Ended::Executed => &mut summary.executed,
            Ended::Replayed => &mut summary.replayed,
            Ended::ReplayedFailure | Ended::Failed => &mut summary.failed,
            Ended::InProgress => &mut summary.in_progress,
            Ended::Conflict => &mut summary.conflicts,
            Ended::Rejected => &mut summary.rejected,
            Ended::Fenced => &mut summary.fenced,
            Ended::Unknown => &mut summary.unknown,
            Ended::StaleEpoch => &mut summary.stale_epoch,
        };
        *counter += 1;
        progress.inc(1);
    }
}

async fn one(
    engine: &Engine,
    finisher: &Finisher,
    claimed: Claimed,
    argv: &[String],
    flags: &RunFlags,
) -> Ended {
    let op = claimed.operation().clone();
    let execution = match engine.begin_claimed(claimed).await {
        Ok(Begin::Execute(e)) => e,
        Ok(Begin::Replay(r)) if r.state == RecordState::Completed => return Ended::Replayed,
        Ok(Begin::Replay(_)) => return Ended::ReplayedFailure,
        Ok(Begin::InProgress { .. }) => return Ended::InProgress,
        Ok(Begin::Conflict { key, reason, .. }) => {
            eprintln!("idem: conflict on key {}: {reason}", key.key);
            return Ended::Conflict;
        }
        Ok(Begin::Rejected { key, reason, .. }) => {
            eprintln!("idem: rejected key {}: {reason}", key.key);
            return Ended::Rejected;
        }
        Err(EngineError::Store(e @ StoreError::StaleEpoch { .. })) => {
            eprintln!("idem: not run, ownership moved on: {e}");
            return Ended::StaleEpoch;
        }
        Err(e) => {
            eprintln!("idem: {e}");
            return Ended::Unknown;
        }
    };
    let op_json = op.canonical_json();
    let spec = CommandSpec {
        argv,
        forward_stdout: false,
        stdin: Some(format!("{op_json}\n").into_bytes()),
    };
    let key = execution.key_hex();
    let recorded = run_and_record(
        &spec,
        execution,
        &op_json,
        |status| flags.is_permanent(status),
        async |execution, ending, outcome| finisher.finish(execution, ending, outcome).await,
    )
    .await;
    match recorded {
        Ok(Recorded::NotStarted(message)) => {
            eprintln!("idem: {message}");
            Ended::Failed
        }
        Ok(Recorded::Killed { signal }) => {
            eprintln!(
                "idem: key {key}: the command was killed by signal {signal}; outcome unknown"
            );
            Ended::Unknown
        }
        Ok(Recorded::Completed) => Ended::Executed,
        Ok(Recorded::Failed { .. }) => Ended::Failed,
        Err(EngineError::Fenced(e)) => {
            eprintln!("idem: deposed while running; result not recorded: {e}");
            Ended::Fenced
        }
        Err(e) => {
            eprintln!("idem: {e}");
            Ended::Unknown
        }
    }
}
