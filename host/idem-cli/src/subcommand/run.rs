//! `idem run`: the nightly-job mode. Every operation of a JSONL file through
//! the command, at most once per key; a re-run executes only what had not
//! completed.
//!
//! The job itself (ownership, the job lease, batched claims and
//! completions, the tally) is the library's [`idem::job::JobRunner`]; this
//! is its face: flags, reading and checking the JSONL, the user's command
//! as the effect ([`CommandEffect`]), the progress bar, the summary and the
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
//!
//! The operations file is read twice, line by line ([`OpsFile`]): once to
//! check and derive every line, once to run them (with the first read's
//! keys: the policy is called once per line); memory grows by about 150
//! bytes per operation, never with the operations' size.
//! `--worker` feeds long-lived workers instead of starting the command per
//! operation ([`CommandEffect::Workers`]).

use std::fs::File;
use std::io::{BufWriter, IsTerminal, Write};
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::Args;
use idem::engine::Engine;
use idem::forensics;
use idem::job::{JobError, JobEvent, JobLeaseOptions, JobOptions, JobPlan, JobRunner, Summary};
use idem_serve::MetricsExport;
use indicatif::{ProgressBar, ProgressStyle};

use crate::command_effect::CommandEffect;
use crate::exit::{self, Failure, engine_failure};
use crate::input::shown;
use crate::ops_file::OpsFile;
use crate::policy_args::PolicyArgs;
use crate::run_flags::{OwnershipFlags, RunFlags};
use crate::shown::{say, tell};
use crate::store_args::{StoreArgs, runtime};

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
    /// Start CMD once per --concurrency slot and feed it one operation per
    /// line on stdin, reading one result line per operation from its
    /// stdout (the worker protocol: docs/reference/worker-protocol.md), instead of starting
    /// CMD for each operation.
    #[arg(long)]
    pub worker: bool,
    /// Write the lines that are not valid operations (or that the policy
    /// refuses or fails to derive) to FILE, one JSON object each with the
    /// line number, the error and the input, and run the rest; without it
    /// one such line stops the run before anything is claimed.
    #[arg(long, value_name = "FILE")]
    pub skip_invalid: Option<PathBuf>,
    /// Wait for the operations another live run holds (up to MAX each, e.g.
    /// `10m`; without MAX, as long as the other run's claim stays live) and
    /// report how they ended, instead of counting them in progress.
    #[arg(long, value_name = "MAX", num_args = 0..=1, value_parser = humantime::parse_duration)]
    pub wait_for_peers: Option<Option<Duration>>,
    /// When the run ends, write the engine's and the store's metrics, and
    /// how its operations ended (`idem_run_operations{end}`), to FILE in
    /// Prometheus's text format (for a node exporter's textfile collector;
    /// written whole, then renamed into place).
    #[arg(long, value_name = "FILE")]
    pub metrics_file: Option<PathBuf>,
    /// The command run for each operation; it reads the operation on stdin
    /// (with --worker: the worker, fed every operation).
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// Runs `idem run`.
pub fn run(args: RunArgs) -> Result<u8, Failure> {
    let policy = args.policy.load()?;
    args.run
        .check(&policy.limits().operation)
        .map_err(Failure::input)?;
    let at_least_one = |n: usize, flag: &str| {
        NonZeroUsize::new(n).ok_or_else(|| Failure::input(format!("{flag} must be at least 1")))
    };
    let concurrency = at_least_one(args.concurrency, "--concurrency")?;
    let claim_batch = at_least_one(args.claim_batch, "--claim-batch")?;
    let finish_batch = at_least_one(args.finish_batch, "--finish-batch")?;
    let ownership = args
        .ownership
        .partition
        .ownership(&policy.info().namespace)
        .map_err(Failure::input)?;
    if args.ownership.job_lease.is_some() && args.ownership.job_lease_ttl.is_zero() {
        return Err(Failure::input("--job-lease-ttl must be more than 0"));
    }
    if args.wait_for_peers == Some(Some(Duration::ZERO)) {
        return Err(Failure::input("--wait-for-peers must be more than 0"));
    }
    let ops = OpsFile::open(&args.ops, policy.limits().operation, args.run.clone())?;
    let metrics = match &args.metrics_file {
        Some(_) => Some(MetricsExport::install().map_err(Failure::input)?),
        None => None,
    };
    let skip_file = match &args.skip_invalid {
        Some(path) => Some(SkipFile::create(path)?),
        None => None,
    };
    let options = JobOptions {
        concurrency,
        claim_batch,
        finish_batch,
        ownership: ownership.clone(),
        job_lease: args.ownership.job_lease.as_ref().map(|name| {
            JobLeaseOptions::new(
                name,
                args.ownership.job_lease_ttl,
                args.run.run_id.as_deref(),
            )
        }),
        skip_invalid: skip_file.is_some(),
        wait_for_peers: args.wait_for_peers.map(|max| max.unwrap_or(Duration::MAX)),
        store_outage: args.run.store_outage,
    };
    let progress = progress_bar();
    // Every line is read and derived before the store is opened: a policy
    // failing on a line leaves no store behind.
    let plan = JobPlan::read(
        &policy,
        ops,
        &options,
        report_to(progress.clone(), skip_file.clone()),
    )
    .map_err(|e| job_failure(e, &args))?;
    runtime()?.block_on(async {
        let store = match args.store.open_riding_out(args.run.store_outage).await? {
            Ok(store) => store,
            Err(code) => return Ok(code),
        };
        let (started_ms, log_store) = (store.clock().now_ms(), store.clone());
        let namespace = policy.info().namespace.clone();
        let engine = Engine::new(policy, store, args.run.engine_options());
        let runner = JobRunner::new(engine, options)
            .on_event(report_to(progress.clone(), skip_file.clone()));
        let effect = CommandEffect::new(
            &args.command,
            args.worker,
            concurrency.get(),
            &args.run.permanent_exit_codes,
        );
        let ran = runner.run_planned(plan, effect.clone()).await;
        effect.shutdown().await;
        progress.finish_and_clear();
        let summary = ran.map_err(|e| job_failure(e, &args))?;
        if let Some(skip_file) = &skip_file {
            skip_file.finish(summary.skipped)?;
        }
        print_summary(
            &summary,
            &args,
            ownership.as_ref().map(|o| o.group.as_str()),
        );
        if let (Some(export), Some(path)) = (&metrics, &args.metrics_file) {
            write_metrics(export, &summary, &log_store, &namespace, path).await?;
        }
        let asked_before = summary.replayed
            + summary.in_progress
            + summary.conflicts
            + summary.rejected
            + summary.sent_to_review
            + summary.fenced;
        if !args.json && asked_before > 0 {
            // Why this run found work asked for before: from the log.
            match forensics::explain_this_process(
                &log_store,
                Some(&namespace),
                started_ms,
                WHY_KEYS,
            )
            .await
            {
                Ok(analysis) => {
                    for line in analysis.summary_lines() {
                        say!("why: {line}");
                    }
                }
                Err(e) => tell!("idem: could not read the attempt log to say why: {e}"),
            }
        }
        Ok(if summary.outage.is_some() {
            exit::STORE_UNAVAILABLE
        } else if summary.stopped.is_some() {
            exit::BAD_INPUT
        } else if summary.all_completed() {
            exit::SUCCESS
        } else {
            exit::INCOMPLETE
        })
    })
}

/// `--metrics-file`: the recorder's text, with this run's ends as gauges,
/// written beside FILE and renamed over it (a collector never reads half).
async fn write_metrics(
    export: &MetricsExport,
    summary: &Summary,
    store: &idem_store::Store,
    namespace: &str,
    path: &std::path::Path,
) -> Result<(), Failure> {
    let serde_json::Value::Object(ends) = serde_json::to_value(summary).unwrap_or_default() else {
        unreachable!("a summary serialises as an object");
    };
    for (end, n) in ends {
        if let Some(n) = n.as_u64() {
            metrics::gauge!(RUN_OPERATIONS, "end" => end).set(n as f64);
        }
    }
    let (text, failure) = export.render(store, Some(namespace)).await;
    if let Some(failure) = failure {
        tell!("idem: --metrics-file: {failure}");
    }
    let partial = path.with_extension("partial");
    std::fs::write(&partial, text)
        .and_then(|()| std::fs::rename(&partial, path))
        .map_err(|e| {
            Failure::input(format!(
                "cannot write --metrics-file {}: {e}",
                path.display()
            ))
        })
}

/// `--skip-invalid FILE`: each skipped line as a JSON object, written as
/// the lines are checked (before anything runs).
#[derive(Clone)]
struct SkipFile {
    path: PathBuf,
    out: Arc<Mutex<SkipOut>>,
}

struct SkipOut {
    writer: BufWriter<File>,
    error: Option<std::io::Error>,
}

impl SkipFile {
    /// Creates (or empties) the file up front: a path that cannot be
    /// written stops the run before anything is checked or claimed.
    fn create(path: &PathBuf) -> Result<SkipFile, Failure> {
        let file = File::create(path).map_err(|e| {
            Failure::input(format!(
                "cannot write --skip-invalid {}: {e}",
                path.display()
            ))
        })?;
        Ok(SkipFile {
            path: path.clone(),
            out: Arc::new(Mutex::new(SkipOut {
                writer: BufWriter::new(file),
                error: None,
            })),
        })
    }

    fn write(&self, line: u64, input: &str, error: &str) {
        let entry = serde_json::json!({ "line": line, "error": error, "input": input });
        let mut out = self.out.lock().expect("skip file lock");
        if out.error.is_none()
            && let Err(e) = writeln!(out.writer, "{entry}")
        {
            out.error = Some(e);
        }
    }

    /// Flushes; a write that failed is an error now, after the run (the
    /// lines are skipped either way, and the summary counts them).
    fn finish(&self, skipped: u64) -> Result<(), Failure> {
        let mut out = self.out.lock().expect("skip file lock");
        let flushed = out.writer.flush();
        match out.error.take().map_or(flushed, Err) {
            Ok(()) => Ok(()),
            Err(e) => Err(Failure::input(format!(
                "{skipped} lines were skipped but --skip-invalid {} could not be written: {e}",
                self.path.display()
            ))),
        }
    }
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
/// ends that deserve a word, and warnings, go to stderr; skipped lines go
/// to the skip file and a line on stderr.
fn report_to(
    progress: ProgressBar,
    skip_file: Option<SkipFile>,
) -> impl Fn(JobEvent<'_>) + Send + Sync + 'static {
    move |event| match event {
        JobEvent::Started { operations } => progress.set_length(operations as u64),
        JobEvent::Ended { note, .. } => {
            if let Some(note) = note {
                tell!("idem: {note}");
            }
            progress.inc(1);
        }
        JobEvent::Skipped {
            position,
            input,
            error,
        } => {
            tell!("idem: skipped line {position}: {error}");
            if let Some(skip_file) = &skip_file {
                skip_file.write(position, input, error);
            }
        }
        JobEvent::Warning(message) => tell!("idem: {message}"),
        // An event this idem does not know (`JobEvent` is non-exhaustive)
        // says nothing here.
        _ => {}
    }
}

/// The exit status and message for a run that stopped before it started;
/// a bad line is named by its number and, once parsed, its operation.
fn job_failure(e: JobError, args: &RunArgs) -> Failure {
    let file = args.ops.display();
    match e {
        JobError::Unreadable {
            position, error, ..
        } => Failure::input(format!("{file} line {position}: {error}")),
        JobError::Derive {
            position,
            operation,
            error,
        } => {
            let failure = engine_failure(error);
            Failure {
                code: failure.code,
                message: format!(
                    "{file} line {position} {}: {}",
                    shown(&operation),
                    failure.message
                ),
            }
        }
        held @ JobError::JobLeaseHeld { .. } => Failure {
            code: exit::JOB_LEASE_HELD,
            message: held.to_string(),
        },
        // The lease, the membership, the source, and any error this idem
        // does not know (`JobError` is non-exhaustive).
        other => Failure::input(other),
    }
}

/// The gauge of a run's ends in `--metrics-file`.
const RUN_OPERATIONS: &str = "idem_run_operations";

/// How many keys asked for before a run's summary looks up, at most (one
/// read of each key's timeline).
const WHY_KEYS: usize = 1_000;

/// What waits for a person, first (the rest of a summary is history): the
/// records `whose` that ended unknown or were sent to review, and the
/// command that lists them. Nothing when none wait.
pub(crate) fn print_waiting(summary: &Summary, whose: &str, store: &StoreArgs) {
    let waiting = summary.unknown + summary.sent_to_review;
    if waiting > 0 {
        say!(
            "{waiting} record{} {whose} wait{} for a person (outcome unknown {}, sent to review {}): idem review --store {}",
            if waiting == 1 { "" } else { "s" },
            if waiting == 1 { "s" } else { "" },
            summary.unknown,
            summary.sent_to_review,
            store.shown()
        );
    }
}

/// The closing summary: one JSON object with `--json`, else a line (and a
/// line about ownership when the run had a share).
fn print_summary(summary: &Summary, args: &RunArgs, ownership_group: Option<&str>) {
    if args.json {
        println!("{}", serde_json::to_string(summary).unwrap_or_default());
        return;
    }
    print_waiting(summary, "of this run", &args.store);
    say!(
        "executed {}, replayed {}, in progress {}, conflicts {}, rejected {}, sent to review {}, failed {}, fenced {}, unknown {}",
        summary.executed,
        summary.replayed,
        summary.in_progress,
        summary.conflicts,
        summary.rejected,
        summary.sent_to_review,
        summary.failed,
        summary.fenced,
        summary.unknown
    );
    let extra = [
        ("policy failed", summary.policy_failed),
        ("skipped", summary.skipped),
        ("refused", summary.refused),
        ("not run", summary.not_run),
    ];
    for (what, n) in extra.iter().filter(|(_, n)| *n > 0) {
        say!("{what} {n}");
    }
    if let Some(outage) = &summary.outage {
        say!(
            "stopped: the store was unavailable for {:.1} s (--store-outage {}): {}",
            outage.lasted_ms as f64 / 1000.0,
            humantime::format_duration(args.run.store_outage),
            outage.error
        );
    }
    if let Some(why) = &summary.stopped {
        say!("stopped: {why}");
    }
    if let Some(group) = ownership_group {
        say!(
            "ownership: group {group}, not owned {}, stale epoch {}",
            summary.not_owned,
            summary.stale_epoch
        );
    }
}
