//! `idem run`: the nightly-job mode. Every operation of a JSONL file through
//! the command, at most once per key; a re-run executes only what had not
//! completed.
//!
//! The job itself (ownership, the job lease, batched claims and
//! completions, the tally) is the library's [`idem::job::JobRunner`]; this
//! is its face: flags, reading and checking the JSONL, the user's command
//! as the effect ([`UserCommand`]), the progress bar, the summary and the
//! exit status.
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
use std::num::NonZeroUsize;
use std::path::PathBuf;

use clap::Args;
use idem::engine::{Engine, EngineError};
use idem::job::{JobError, JobEvent, JobLeaseOptions, JobOptions, JobRunner, Ownership, Summary};
use idem_core::Operation;
use indicatif::{ProgressBar, ProgressStyle};

use crate::exit::{self, Failure, engine_failure};
use crate::input::read_op_bytes;
use crate::policy_args::PolicyArgs;
use crate::run_flags::{OwnershipFlags, RunFlags};
use crate::store_args::{StoreArgs, runtime};
use crate::user_command::UserCommand;

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

/// Runs `idem run`.
pub fn run(args: RunArgs) -> Result<u8, Failure> {
    let policy = args.policy.load()?;
    let bytes = read_op_bytes(&args.ops)?;
    let text = String::from_utf8(bytes)
        .map_err(|_| Failure::input(format!("{} is not UTF-8", args.ops.display())))?;
    // Read every operation before running any: bad input stops the run
    // before it changes anything (the runner then derives them all first).
    let limits = policy.limits().operation;
    let mut ops = Vec::new();
    let mut lines = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let mut op = Operation::from_json(line, &limits)
            .map_err(|e| Failure::input(format!("{} line {}: {e}", args.ops.display(), i + 1)))?;
        args.run.apply(&mut op);
        ops.push(op);
        lines.push(i + 1);
    }
    let at_least_one = |n: usize, flag: &str| {
        NonZeroUsize::new(n).ok_or_else(|| Failure::input(format!("{flag} must be at least 1")))
    };
    let concurrency = at_least_one(args.concurrency, "--concurrency")?;
    let claim_batch = at_least_one(args.claim_batch, "--claim-batch")?;
    let finish_batch = at_least_one(args.finish_batch, "--finish-batch")?;
    let membership = args.ownership.membership().map_err(Failure::input)?;
    if args.ownership.job_lease.is_some() && args.ownership.job_lease_ttl.is_zero() {
        return Err(Failure::input("--job-lease-ttl must be more than 0"));
    }
    let group = args
        .ownership
        .group
        .clone()
        .unwrap_or_else(|| policy.info().namespace.clone());
    let options = JobOptions {
        concurrency,
        claim_batch,
        finish_batch,
        ownership: membership.as_ref().map(|(members, member)| Ownership {
            group: group.clone(),
            members: members.clone(),
            member: member.clone(),
        }),
        job_lease: args.ownership.job_lease.as_ref().map(|name| {
            JobLeaseOptions::new(
                name,
                args.ownership.job_lease_ttl,
                args.run.run_id.as_deref(),
            )
        }),
    };
    let command = UserCommand {
        argv: args.command.clone(),
        forward_stdout: false,
        held_stdout: None,
        op_on_stdin: true,
        permanent_exit_codes: args.run.permanent_exit_codes.clone(),
    };
    runtime()?.block_on(async {
        let store = args.store.open().await?;
        let engine = Engine::new(policy, store, args.run.engine_options());
        let progress = progress_bar();
        let runner = JobRunner::new(engine, options).on_event(report_to(progress.clone()));
        let ran = runner.run(ops, command).await;
        progress.finish_and_clear();
        let summary = ran.map_err(|e| job_failure(e, &args, &lines))?;
        print_summary(
            &summary,
            &args,
            membership.is_some().then_some(group.as_str()),
        );
        Ok(if summary.all_completed() {
            exit::SUCCESS
        } else {
            exit::INCOMPLETE
        })
    })
}

/// A progress bar on a terminal; hidden otherwise.
fn progress_bar() -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(0);
    bar.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} {per_sec} eta {eta} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar
}

/// What the run says as it goes: each operation moves the bar, and the
/// ends that deserve a word, and warnings, go to stderr.
fn report_to(progress: ProgressBar) -> impl Fn(JobEvent<'_>) + Send + Sync + 'static {
    move |event| match event {
        JobEvent::Started { operations } => progress.set_length(operations as u64),
        JobEvent::Ended { note, .. } => {
            if let Some(note) = note {
                eprintln!("idem: {note}");
            }
            progress.inc(1);
        }
        JobEvent::Warning(message) => eprintln!("idem: {message}"),
    }
}

/// The exit status and message for a run that stopped before it started.
fn job_failure(e: JobError, args: &RunArgs, lines: &[usize]) -> Failure {
    match e {
        JobError::Derive {
            index,
            error: EngineError::Refused(r),
        } => Failure {
            code: exit::POLICY_REFUSED,
            message: format!(
                "{} line {}: the policy refused it: {r}",
                args.ops.display(),
                lines[index]
            ),
        },
        JobError::Derive { error, .. } => engine_failure(error),
        held @ JobError::JobLeaseHeld { .. } => Failure {
            code: exit::JOB_LEASE_HELD,
            message: held.to_string(),
        },
        other @ (JobError::JobLease { .. } | JobError::Membership { .. }) => Failure::input(other),
    }
}

/// The closing summary: one JSON object with `--json`, else a line (and a
/// line about ownership when the run had a share).
fn print_summary(summary: &Summary, args: &RunArgs, ownership_group: Option<&str>) {
    if args.json {
        println!("{}", serde_json::to_string(summary).unwrap_or_default());
        return;
    }
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
    if let Some(group) = ownership_group {
        println!(
            "ownership: group {group}, not owned {}, stale epoch {}",
            summary.not_owned, summary.stale_epoch
        );
    }
}
