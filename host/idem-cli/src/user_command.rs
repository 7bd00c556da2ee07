//! Running the user's command (`idem exec -- CMD`, `idem run -- CMD`) for
//! one operation: environment, stdin, captured stdout, and what its exit
//! means for the record.

use std::process::Stdio;

use idem::engine::{EngineError, Execution};
use idem_store::{Ending, Outcome};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;

/// How much of the command's stdout is stored (and replayed).
pub const MAX_STORED_STDOUT: usize = 64 * 1024;

/// What the command did.
pub enum CommandEnd {
    /// It exited with a status; its captured stdout.
    Exited { status: i32, stdout: Vec<u8> },
    /// It was killed by a signal: the effect may or may not have happened.
    Killed { signal: i32 },
}

/// How the command is run.
pub struct CommandSpec<'a> {
    pub argv: &'a [String],
    /// Forward the command's stdout to ours as well as capturing it.
    pub forward_stdout: bool,
    /// Written to the command's stdin (then closed); `None` inherits ours.
    pub stdin: Option<Vec<u8>>,
}

/// Runs the command for a held execution. The environment carries the key,
/// the fence and the attempt, so the command can hand them downstream.
pub async fn run_command(
    spec: &CommandSpec<'_>,
    execution: &Execution,
    op_json: &str,
) -> std::io::Result<CommandEnd> {
    let mut cmd = Command::new(&spec.argv[0]);
    cmd.args(&spec.argv[1..])
        .env("IDEM_KEY", execution.key_hex())
        .env("IDEM_FENCE", execution.fence().to_string())
        .env("IDEM_ATTEMPT", execution.attempt().to_string())
        .env(
            "IDEM_TAKE_OVER",
            if execution.is_take_over() { "1" } else { "0" },
        )
        .env("IDEM_PARTITION", &execution.derivation().partition)
        .env("IDEM_OP", op_json)
        .stdout(Stdio::piped())
        .stdin(if spec.stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::inherit()
        })
        .kill_on_drop(false);
    let mut child = cmd.spawn()?;
    if let (Some(input), Some(mut pipe)) = (spec.stdin.clone(), child.stdin.take()) {
        tokio::spawn(async move {
            // A command that does not read its stdin closes the pipe early;
            // that is its business.
            let _ = pipe.write_all(&input).await;
        });
    }
    let mut stdout = child.stdout.take().expect("stdout is piped");
    let mut captured = Vec::new();
    let mut buf = vec![0u8; 8192];
    let mut out = tokio::io::stdout();
    loop {
        let n = stdout.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        if spec.forward_stdout {
            out.write_all(&buf[..n]).await?;
        }
        let room = MAX_STORED_STDOUT.saturating_sub(captured.len());
        captured.extend_from_slice(&buf[..n.min(room)]);
    }
    out.flush().await?;
    let status = child.wait().await?;
    Ok(match status.code() {
        Some(code) => CommandEnd::Exited {
            status: code,
            stdout: captured,
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

/// What running the command under a claim came to, once recorded.
pub enum Recorded {
    /// The command could not be started (recorded failed-retryable, status
    /// 127: nothing happened, so a retry is safe). The message says why.
    NotStarted(String),
    /// Killed by a signal: the effect may have happened. Nothing recorded;
    /// the claim expires and the policy decides what a duplicate gets.
    Killed { signal: i32 },
    /// Exit 0, recorded completed.
    Completed,
    /// Exit `status`, recorded failed (retryable unless `is_permanent`).
    Failed { status: i32 },
}

/// Runs the command for `execution` (heartbeating its claim meanwhile) and
/// records how it ended under the claim's fence, through `record` (`idem
/// exec` records at once, `idem run` through its finisher): the one mapping
/// from a command's end to the record. An [`EngineError::Fenced`] means this
/// holder was deposed while the command ran, and nothing was recorded.
pub async fn run_and_record(
    spec: &CommandSpec<'_>,
    execution: Execution,
    op_json: &str,
    is_permanent: impl Fn(i32) -> bool,
    record: impl AsyncFnOnce(Execution, Ending, Outcome) -> Result<(), EngineError>,
) -> Result<Recorded, EngineError> {
    let heartbeat = idem::engine::spawn_heartbeat(&execution);
    let ended = run_command(spec, &execution, op_json).await;
    heartbeat.abort();
    match ended {
        Err(e) => {
            let message = format!("cannot run {}: {e}", spec.argv[0]);
            let failed = Ending::Failed { retryable: true };
            record(execution, failed, Outcome::error(127, message.clone())).await?;
            Ok(Recorded::NotStarted(message))
        }
        Ok(CommandEnd::Killed { signal }) => Ok(Recorded::Killed { signal }),
        Ok(CommandEnd::Exited { status: 0, stdout }) => {
            record(execution, Ending::Completed, Outcome::new(0, stdout)).await?;
            Ok(Recorded::Completed)
        }
        Ok(CommandEnd::Exited { status, stdout }) => {
            let failed = Ending::Failed {
                retryable: !is_permanent(status),
            };
            record(execution, failed, failure_outcome(status, stdout)).await?;
            Ok(Recorded::Failed { status })
        }
    }
}

/// The stored outcome of a failed command.
fn failure_outcome(status: i32, stdout: Vec<u8>) -> Outcome {
    Outcome {
        status,
        body: stdout,
        error: Some(format!("command exited with status {status}")),
    }
}
