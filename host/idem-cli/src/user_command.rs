//! The user's command (`idem exec -- CMD`, `idem run -- CMD`) as the
//! [`Effect`] performed under a claim: its environment and stdin, its
//! captured stdout, and the one mapping from how it ended to what is
//! recorded ([`EffectOutcome`]). Heartbeating the claim and recording the
//! outcome under its fence are the library's ([`idem::job::run_effect`],
//! [`idem::job::JobRunner`]).

use std::process::Stdio;
use std::sync::{Arc, Mutex};

use idem::engine::{ExecContext, Failed};
use idem::job::{Effect, EffectOutcome};
use idem_core::Operation;
use idem_store::Outcome;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;

/// How much of the command's stdout is stored (and replayed).
pub const MAX_STORED_STDOUT: usize = 64 * 1024;

/// How much of the end of the command's stderr is kept to say why it
/// failed (its last line, in the attempt log).
const STDERR_TAIL: usize = 4 * 1024;

/// What the command did.
enum CommandEnd {
    /// It exited with a status; its captured stdout, and the last line it
    /// wrote to stderr (empty when none).
    Exited {
        status: i32,
        stdout: Vec<u8>,
        last_error_line: String,
    },
    /// It was killed by a signal: the effect may or may not have happened.
    Killed { signal: i32 },
}

/// The user's command, run once per operation this run holds the claim of.
#[derive(Clone)]
pub struct UserCommand {
    /// The command and its arguments.
    pub argv: Vec<String>,
    /// Forward the command's stdout to ours as well as capturing it (`idem
    /// exec`: the caller sees the command's output).
    pub forward_stdout: bool,
    /// With `forward_stdout`: hold everything the command prints here (in
    /// memory) instead of writing it as it comes, for the caller to release
    /// once the outcome is recorded (`idem exec --buffer-stdout`), so a
    /// reader of our stdout never sees the output of a run whose outcome
    /// was not recorded.
    pub held_stdout: Option<Arc<Mutex<Vec<u8>>>>,
    /// Write the canonical operation and a newline to the command's stdin,
    /// then close it (`idem run`); otherwise the command inherits ours.
    pub op_on_stdin: bool,
    /// Exit statuses that mean a permanent failure; any other non-zero
    /// status is retryable.
    pub permanent_exit_codes: Vec<i32>,
}

impl Effect for UserCommand {
    async fn run(&self, op: Operation, ctx: ExecContext) -> EffectOutcome {
        let op_json = op.canonical_json();
        let ended = self.spawn_and_wait(&ctx, &op_json).await;
        self.outcome(ended)
    }
}

impl UserCommand {
    /// Runs the command for a held claim. The environment carries the key,
    /// the fence and the attempt, so the command can hand them downstream.
    async fn spawn_and_wait(
        &self,
        ctx: &ExecContext,
        op_json: &str,
    ) -> std::io::Result<CommandEnd> {
        let stdin = self
            .op_on_stdin
            .then(|| format!("{op_json}\n").into_bytes());
        let mut cmd = Command::new(&self.argv[0]);
        cmd.args(&self.argv[1..])
            .env("IDEM_KEY", &ctx.key)
            .env("IDEM_FENCE", ctx.fence.to_string())
            .env("IDEM_ATTEMPT", ctx.attempt.to_string())
            .env("IDEM_TAKE_OVER", if ctx.take_over { "1" } else { "0" })
            .env("IDEM_PARTITION", &ctx.partition)
            .env("IDEM_OP", op_json)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::inherit()
            })
            .kill_on_drop(false);
        let mut child = cmd.spawn()?;
        if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
            tokio::spawn(async move {
                // A command that does not read its stdin closes the pipe early;
                // that is its business.
                let _ = pipe.write_all(&input).await;
            });
        }
        // Passed through as it comes, its end kept: why a command failed is
        // usually the last thing it said.
        let stderr = child.stderr.take().expect("stderr is piped");
        let stderr = tokio::spawn(pass_through_keeping_the_end(stderr));
        let mut stdout = child.stdout.take().expect("stdout is piped");
        let mut captured = Vec::new();
        let mut buf = vec![0u8; 8192];
        let mut out = tokio::io::stdout();
        loop {
            let n = stdout.read(&mut buf).await?;
            if n == 0 {
                break;
            }
            match (&self.held_stdout, self.forward_stdout) {
                (Some(held), true) => held
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner())
                    .extend_from_slice(&buf[..n]),
                (None, true) => out.write_all(&buf[..n]).await?,
                (_, false) => {}
            }
            let room = MAX_STORED_STDOUT.saturating_sub(captured.len());
            captured.extend_from_slice(&buf[..n.min(room)]);
        }
        out.flush().await?;
        let status = child.wait().await?;
        let last_error_line = stderr
            .await
            .map(|tail| last_line(&tail))
            .unwrap_or_default();
        Ok(match status.code() {
            Some(code) => CommandEnd::Exited {
                status: code,
                stdout: captured,
                last_error_line,
            },
            None => {
                #[cfg(unix)]
                let signal = std::os::unix::process::ExitStatusExt::signal(&status).unwrap_or(0);
                #[cfg(not(unix))]
                let signal = 0;
                CommandEnd::Killed { signal }
            }
        })
    }

    /// What the command's end means for the record: exit 0 completed; any
    /// other status failed (permanent if listed, else retryable); killed by
    /// a signal unknown (the effect may have happened: nothing recorded,
    /// the claim expires and the policy decides); a command that could not
    /// be run failed-retryable with status 127 (nothing happened, so a
    /// retry is safe).
    fn outcome(&self, ended: std::io::Result<CommandEnd>) -> EffectOutcome {
        match ended {
            Err(e) => {
                let reason = format!("cannot run {}: {e}", self.argv[0]);
                EffectOutcome::NotStarted {
                    outcome: Outcome::error(127, reason.clone()),
                    reason,
                }
            }
            Ok(CommandEnd::Killed { signal }) => EffectOutcome::Unknown {
                reason: format!("the command was killed by signal {signal}"),
            },
            Ok(CommandEnd::Exited {
                status: 0, stdout, ..
            }) => EffectOutcome::Completed(Outcome::new(0, stdout)),
            Ok(CommandEnd::Exited {
                status,
                stdout,
                last_error_line,
            }) => EffectOutcome::Failed(Failed {
                retryable: !self.permanent_exit_codes.contains(&status),
                outcome: Outcome {
                    status,
                    body: stdout,
                    error: Some(if last_error_line.is_empty() {
                        format!("command exited with status {status}")
                    } else {
                        format!("command exited with status {status}: {last_error_line}")
                    }),
                },
            }),
        }
    }
}

/// Copies `stderr` to ours as it comes and returns its last
/// [`STDERR_TAIL`] bytes.
async fn pass_through_keeping_the_end(mut stderr: tokio::process::ChildStderr) -> Vec<u8> {
    let mut tail = Vec::new();
    let mut buf = vec![0u8; 8192];
    let mut ours = tokio::io::stderr();
    while let Ok(n) = stderr.read(&mut buf).await {
        if n == 0 {
            break;
        }
        // Ours closed: the command's words are still kept.
        let _ = ours.write_all(&buf[..n]).await;
        tail.extend_from_slice(&buf[..n]);
        if tail.len() > STDERR_TAIL {
            tail.drain(..tail.len() - STDERR_TAIL);
        }
    }
    let _ = ours.flush().await;
    tail
}

/// The last line of `tail` with text on it, trimmed (lossy UTF-8; stored
/// as it is, escaped wherever it is shown).
fn last_line(tail: &[u8]) -> String {
    String::from_utf8_lossy(tail)
        .lines()
        .map(str::trim)
        .rfind(|l| !l.is_empty())
        .unwrap_or_default()
        .to_string()
}
