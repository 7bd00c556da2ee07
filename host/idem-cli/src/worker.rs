//! `idem run --worker -- CMD`: long-lived workers instead of a process per
//! operation. The [`Effect`] here hands each operation to an idle worker
//! over its stdin and reads the result from its stdout, one line each way
//! (the protocol: [`protocol`], and `docs/reference/worker-protocol.md`).
//!
//! A pool of `--concurrency` slots, each holding at most one worker,
//! started when first needed (a re-run that only replays starts none).
//! When a worker dies:
//!
//! - while it holds an operation, that operation's outcome is unknown,
//!   exactly as for a command killed mid-operation: nothing is recorded,
//!   the claim lapses and the policy decides. The slot starts a fresh
//!   worker for its next operation, so one crash (a panic on one input, the
//!   OOM killer) costs one operation, not the night.
//! - before it said it was ready, no operation was sent: the one waiting
//!   fails retryable (nothing happened; a re-run retries it).
//!
//! After [`MAX_DEATHS_IN_A_ROW`] deaths with no answer in between, the pool
//! gives up: every later operation fails retryable without being sent. A
//! worker that cannot work would otherwise turn every operation of the run
//! into an unknown outcome, each one for a human to review.

pub mod protocol;

use std::process::Stdio;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use idem::engine::ExecContext;
use idem::job::{Effect, EffectOutcome};
use idem_core::Operation;
use idem_store::Outcome;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use protocol::{Answer, MAX_LINE, READY};

/// Deaths in a row, with no operation answered in between, after which the
/// pool stops starting workers.
pub const MAX_DEATHS_IN_A_ROW: u32 = 3;

/// How long a worker has to exit once its stdin is closed at the end of the
/// run, before it is killed.
const EXIT_GRACE: Duration = Duration::from_secs(10);

/// The workers of one run (a handle: clones share the pool).
#[derive(Clone)]
pub struct WorkerPool(Arc<Pool>);

/// The pool a [`WorkerPool`] shares.
struct Pool {
    argv: Vec<String>,
    permanent_exit_codes: Vec<i32>,
    /// Idle slots; a running operation holds its slot. There are as many
    /// slots as operations run at once, so one is always free.
    idle: Mutex<Vec<Slot>>,
    deaths_in_a_row: AtomicU32,
}

/// A slot and the worker it holds, if started.
struct Slot {
    index: usize,
    worker: Option<Worker>,
}

/// A running worker.
struct Worker {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl WorkerPool {
    /// A pool of `slots` workers running `argv`; exit statuses in
    /// `permanent_exit_codes` are permanent failures when a worker's answer
    /// does not say.
    pub fn new(argv: Vec<String>, slots: usize, permanent_exit_codes: Vec<i32>) -> Self {
        WorkerPool(Arc::new(Pool {
            argv,
            permanent_exit_codes,
            idle: Mutex::new(
                (0..slots)
                    .rev()
                    .map(|index| Slot {
                        index,
                        worker: None,
                    })
                    .collect(),
            ),
            deaths_in_a_row: AtomicU32::new(0),
        }))
    }

    /// Ends the run's workers: see [`Pool::shutdown`].
    pub async fn shutdown(&self) -> Vec<String> {
        self.0.shutdown().await
    }
}

impl Pool {
    /// Ends the run's workers: closes their stdin (the signal to exit) and
    /// waits for each; one that does not exit in time is killed. Returns a
    /// line for each worker that did not end cleanly.
    pub async fn shutdown(&self) -> Vec<String> {
        let slots = std::mem::take(&mut *self.idle.lock().expect("pool lock"));
        let mut complaints = Vec::new();
        for slot in slots {
            let Some(Worker {
                mut child, stdin, ..
            }) = slot.worker
            else {
                continue;
            };
            drop(stdin);
            let status = match tokio::time::timeout(EXIT_GRACE, child.wait()).await {
                Ok(status) => status,
                Err(_) => {
                    let _ = child.start_kill();
                    complaints.push(format!(
                        "worker {} did not exit within {EXIT_GRACE:?} of its input closing; killed",
                        slot.index
                    ));
                    child.wait().await
                }
            };
            match status {
                Ok(s) if s.success() => {}
                Ok(s) => complaints.push(format!("worker {} exited with {s}", slot.index)),
                Err(e) => complaints.push(format!("worker {}: {e}", slot.index)),
            }
        }
        complaints
    }

    /// Starts a worker and waits for its ready line.
    async fn start(&self, index: usize) -> Result<Worker, String> {
        let mut cmd = Command::new(&self.argv[0]);
        cmd.args(&self.argv[1..])
            .env("IDEM_WORKER", index.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true);
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", self.argv[0]))?;
        let stdin = child.stdin.take().expect("stdin is piped");
        let stdout = BufReader::new(child.stdout.take().expect("stdout is piped"));
        let mut worker = Worker {
            child,
            stdin,
            stdout,
        };
        match worker.read_line().await {
            Ok(Some(line)) if protocol::is_ready(&line) => Ok(worker),
            Ok(Some(line)) => {
                let _ = worker.child.start_kill();
                Err(format!(
                    "worker {index} said {} before {READY}",
                    protocol::shown(&line)
                ))
            }
            Ok(None) => Err(format!(
                "worker {index} exited before it was ready ({})",
                worker.exit_status().await
            )),
            Err(e) => Err(format!("worker {index}: {e}")),
        }
    }

    /// Sends one operation to the slot's worker (starting it first when
    /// needed) and maps the answer to an outcome.
    async fn perform(&self, slot: &mut Slot, op: &Operation, ctx: &ExecContext) -> EffectOutcome {
        if self.deaths_in_a_row.load(Ordering::SeqCst) >= MAX_DEATHS_IN_A_ROW {
            return not_started(format!(
                "not sent: the workers died {MAX_DEATHS_IN_A_ROW} times in a row without answering"
            ));
        }
        let worker = match &mut slot.worker {
            Some(worker) => worker,
            None => match self.start(slot.index).await {
                Ok(worker) => slot.worker.insert(worker),
                Err(e) => {
                    self.deaths_in_a_row.fetch_add(1, Ordering::SeqCst);
                    return not_started(e);
                }
            },
        };
        let request = protocol::request(op, ctx);
        if let Err(e) = worker.stdin.write_all(request.as_bytes()).await {
            // The whole line never reached the worker (it closed its
            // input), so it never saw this operation: nothing happened.
            let why = format!(
                "not sent: worker {} stopped reading ({e}; {})",
                slot.index,
                worker.exit_status().await
            );
            slot.worker = None;
            self.deaths_in_a_row.fetch_add(1, Ordering::SeqCst);
            return not_started(why);
        }
        let line = match worker.read_line().await {
            Ok(Some(line)) => line,
            Ok(None) => {
                // It died holding the operation: it may have done the effect.
                let why = format!(
                    "worker {} died while running the operation ({})",
                    slot.index,
                    worker.exit_status().await
                );
                slot.worker = None;
                self.deaths_in_a_row.fetch_add(1, Ordering::SeqCst);
                return EffectOutcome::Unknown { reason: why };
            }
            Err(e) => {
                let why = format!("worker {}: {e}", slot.index);
                let _ = worker.child.start_kill();
                slot.worker = None;
                return EffectOutcome::Unknown { reason: why };
            }
        };
        match Answer::parse(&line) {
            Ok(answer) => {
                self.deaths_in_a_row.store(0, Ordering::SeqCst);
                answer.into_outcome(&self.permanent_exit_codes)
            }
            Err(e) => {
                // Whatever the worker did, it did not say it in the
                // protocol: the effect may have happened. A worker out of
                // step would answer the next operation with this one's
                // result, so it is replaced.
                let _ = worker.child.start_kill();
                slot.worker = None;
                EffectOutcome::Unknown {
                    reason: format!(
                        "worker {} answered {}: {e}",
                        slot.index,
                        protocol::shown(&line)
                    ),
                }
            }
        }
    }
}

impl Effect for WorkerPool {
    async fn run(&self, op: Operation, ctx: ExecContext) -> EffectOutcome {
        let pool = &self.0;
        let taken = pool.idle.lock().expect("pool lock").pop();
        let Some(mut slot) = taken else {
            // Cannot happen: the runner never runs more operations at once
            // than there are slots.
            return not_started("no idle worker".into());
        };
        let outcome = pool.perform(&mut slot, &op, &ctx).await;
        pool.idle.lock().expect("pool lock").push(slot);
        outcome
    }
}

impl Worker {
    /// The next line from the worker (without its newline), `None` at end of
    /// output; a line longer than [`MAX_LINE`] is an error.
    async fn read_line(&mut self) -> std::io::Result<Option<String>> {
        let mut line = Vec::new();
        let limit = (MAX_LINE + 1) as u64;
        let n = (&mut self.stdout)
            .take(limit)
            .read_until(b'\n', &mut line)
            .await?;
        if n == 0 {
            return Ok(None);
        }
        if line.last() != Some(&b'\n') {
            if line.len() > MAX_LINE {
                return Err(std::io::Error::other(format!(
                    "a line longer than {MAX_LINE} bytes"
                )));
            }
            // The worker ended in the middle of a line: no answer.
            return Ok(None);
        }
        line.pop();
        String::from_utf8(line)
            .map(Some)
            .map_err(|_| std::io::Error::other("a line that is not UTF-8"))
    }

    /// How the worker ended, once it has (a short wait: its output closed).
    async fn exit_status(&mut self) -> String {
        match tokio::time::timeout(Duration::from_secs(5), self.child.wait()).await {
            Ok(Ok(status)) => status.to_string(),
            Ok(Err(e)) => e.to_string(),
            Err(_) => {
                let _ = self.child.start_kill();
                "its output closed but it did not exit; killed".into()
            }
        }
    }
}

/// An operation that was never handed to a worker: recorded failed and
/// retryable (status 127, as for a command that cannot be run), since
/// nothing happened.
fn not_started(reason: String) -> EffectOutcome {
    EffectOutcome::NotStarted {
        outcome: Outcome::error(127, reason.clone()),
        reason,
    }
}
