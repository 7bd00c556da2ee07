//! `idem run`: the nightly-job mode. Every operation of a JSONL file through
//! the command, at most once per key; a re-run executes only what had not
//! completed.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;
use idem::core::{KeyedDerivation, Operation};
use idem::engine::{Begin, Engine, EngineError};
use idem::store::{Outcome, RecordState};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use tokio::sync::Semaphore;

use crate::Failure;
use crate::command::{CommandEnd, CommandSpec, failure_outcome, run_command};
use crate::policy_args::PolicyArgs;
use crate::run_flags::RunFlags;
use crate::store_args::{StoreArgs, runtime};

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
    #[command(flatten)]
    pub run: RunFlags,
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
}

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
}

pub fn run(args: RunArgs) -> Result<u8, Failure> {
    let policy = args.policy.load()?;
    let bytes = crate::key::read_op_bytes(&args.ops)?;
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
    runtime()?.block_on(async move {
        let store = args.store.open().await?;
        let engine = Engine::new(policy, store, args.run.engine_options());
        let mut derived = Vec::with_capacity(ops.len());
        for (line, op) in ops {
            let keyed = engine.derive(&op).map_err(|e| match e {
                EngineError::Refused(r) => {
                    Failure { code: 3, message: format!("{} line {line}: the policy refused it: {r}", args.ops.display()) }
                }
                other => crate::engine_failure(other),
            })?;
            derived.push((op, keyed));
        }
        let summary = run_all(Arc::new(engine), derived, &args).await;
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
        }
        let all_done = summary.in_progress
            + summary.conflicts
            + summary.rejected
            + summary.failed
            + summary.fenced
            + summary.unknown
            == 0;
        Ok(if all_done { 0 } else { 1 })
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
    for (op, keyed) in ops {
        let permit = permits
            .clone()
            .acquire_owned()
            .await
            .expect("the semaphore is never closed");
        let (engine, command, flags) = (engine.clone(), command.clone(), flags.clone());
        tasks.spawn(async move {
            let ended = one(&engine, op, keyed, &command, &flags).await;
            drop(permit);
            ended
        });
    }
    let mut summary = Summary::default();
    while let Some(joined) = tasks.join_next().await {
        let ended = joined.unwrap_or_else(|e| {
            tracing::error!(error = %e, "operation task failed");
            Ended::Unknown
        });
        let counter = match ended {
            Ended::Executed => &mut summary.executed,
            Ended::Replayed => &mut summary.replayed,
            Ended::ReplayedFailure | Ended::Failed => &mut summary.failed,
            Ended::InProgress => &mut summary.in_progress,
            Ended::Conflict => &mut summary.conflicts,
            Ended::Rejected => &mut summary.rejected,
            Ended::Fenced => &mut summary.fenced,
            Ended::Unknown => &mut summary.unknown,
        };
        *counter += 1;
        progress.inc(1);
    }
    progress.finish_and_clear();
    summary
}

async fn one(
    engine: &Engine,
    op: Operation,
    keyed: KeyedDerivation,
    argv: &[String],
    flags: &RunFlags,
) -> Ended {
    let execution = match engine.begin_derived(&op, keyed).await {
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
        Err(e) => {
            eprintln!("idem: {e}");
            return Ended::Unknown;
        }
    };
    let heartbeat = idem::engine::spawn_heartbeat(&execution);
    let op_json = op.canonical_json();
    let spec = CommandSpec {
        argv,
        forward_stdout: false,
        stdin: Some(format!("{op_json}\n").into_bytes()),
    };
    let ended = run_command(&spec, &execution, &op_json).await;
    heartbeat.abort();
    let recorded = match ended {
        Err(e) => {
            let message = format!("cannot run {}: {e}", argv[0]);
            eprintln!("idem: {message}");
            execution
                .fail(true, Outcome::error(127, message))
                .await
                .map(|()| Ended::Failed)
        }
        Ok(CommandEnd::Killed { signal }) => {
            eprintln!(
                "idem: key {} : the command was killed by signal {signal}; outcome unknown",
                execution.key_hex()
            );
            Ok(Ended::Unknown)
        }
        Ok(CommandEnd::Exited { status: 0, stdout }) => execution
            .complete(Outcome::new(0, stdout))
            .await
            .map(|()| Ended::Executed),
        Ok(CommandEnd::Exited { status, stdout }) => {
            let retryable = !flags.is_permanent(status);
            execution
                .fail(retryable, failure_outcome(status, stdout))
                .await
                .map(|()| Ended::Failed)
        }
    };
    match recorded {
        Ok(ended) => ended,
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
