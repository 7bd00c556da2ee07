//! `idem exec`: run a command at most once per key.

use std::path::PathBuf;

use clap::Args;
use idem::core::Operation;
use idem::engine::{Begin, Engine};
use idem::store::Outcome;

use crate::Failure;
use crate::command::{
    CommandEnd, CommandSpec, EX_CONFLICT, EX_FENCED, EX_REJECTED, EX_TEMPFAIL, EX_UNKNOWN,
    exit_code, failure_outcome, run_command,
};
use crate::key::read_op_bytes;
use crate::policy_args::PolicyArgs;
use crate::run_flags::RunFlags;
use crate::store_args::{StoreArgs, runtime};

#[derive(Args, Debug)]
pub struct ExecArgs {
    #[command(flatten)]
    pub policy: PolicyArgs,
    #[command(flatten)]
    pub store: StoreArgs,
    /// The operation as JSON: a file, or `-` for standard input.
    #[arg(long, value_name = "OP.json")]
    pub op: PathBuf,
    #[command(flatten)]
    pub run: RunFlags,
    /// The command and its arguments.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<String>,
}

pub fn run(args: ExecArgs) -> Result<u8, Failure> {
    let policy = args.policy.load()?;
    let bytes = read_op_bytes(&args.op)?;
    let mut op = Operation::from_slice(&bytes, &policy.limits().operation)
        .map_err(|e| Failure::input(format!("{}: {e}", args.op.display())))?;
    args.run.apply(&mut op);
    runtime()?.block_on(async {
        let store = args.store.open().await?;
        let engine = Engine::new(policy, store, args.run.engine_options());
        exec(&engine, &op, &args).await
    })
}

async fn exec(engine: &Engine, op: &Operation, args: &ExecArgs) -> Result<u8, Failure> {
    let begun = engine.begin(op).await.map_err(crate::engine_failure)?;
    let execution = match begun {
        Begin::Execute(e) => e,
        Begin::Replay(r) => {
            eprintln!(
                "idem: replaying the {} outcome of key {} (fence {}): the command does not run again",
                r.state.as_str(),
                r.key.key,
                r.fence
            );
            use std::io::Write;
            let mut out = std::io::stdout();
            let _ = out.write_all(&r.outcome.body);
            let _ = out.flush();
            return Ok(exit_code(r.outcome.status));
        }
        Begin::InProgress {
            key,
            retry_after_ms,
            reason,
        } => {
            let after = retry_after_ms
                .map(|ms| format!("; retry after {ms} ms"))
                .unwrap_or_default();
            eprintln!(
                "idem: key {} is in progress elsewhere: {reason}{after}",
                key.key
            );
            return Ok(EX_TEMPFAIL);
        }
        Begin::Conflict {
            key,
            status,
            reason,
        } => {
            eprintln!("idem: conflict ({status}) on key {}: {reason}", key.key);
            return Ok(EX_CONFLICT);
        }
        Begin::Rejected {
            key,
            status,
            reason,
            marked_unknown,
            ..
        } => {
            let review = if marked_unknown {
                " (marked outcome-unknown for review)"
            } else {
                ""
            };
            eprintln!(
                "idem: rejected ({status}) on key {}{review}: {reason}",
                key.key
            );
            return Ok(EX_REJECTED);
        }
    };
    let heartbeat = idem::engine::spawn_heartbeat(&execution);
    let spec = CommandSpec {
        argv: &args.command,
        forward_stdout: true,
        stdin: None,
    };
    let ended = run_command(&spec, &execution, &op.canonical_json()).await;
    heartbeat.abort();
    let key = execution.key_hex();
    let (result, code) = match ended {
        Err(e) => {
            // The command never started: nothing happened, so a retry is safe.
            let message = format!("cannot run {}: {e}", args.command[0]);
            let recorded = execution
                .fail(true, Outcome::error(127, message.clone()))
                .await;
            recorded.map_err(crate::engine_failure)?;
            return Err(Failure::input(message));
        }
        Ok(CommandEnd::Killed { signal }) => {
            // The effect may have happened: leave the claim to expire, and
            // the policy decides what a duplicate gets (review, by default).
            eprintln!(
                "idem: the command was killed by signal {signal}; key {key} stays claimed until its lease expires, then goes to the policy (its outcome is unknown)"
            );
            return Ok(EX_UNKNOWN);
        }
        Ok(CommandEnd::Exited { status: 0, stdout }) => {
            (execution.complete(Outcome::new(0, stdout)).await, 0)
        }
        Ok(CommandEnd::Exited { status, stdout }) => {
            let retryable = !args.run.is_permanent(status);
            (
                execution
                    .fail(retryable, failure_outcome(status, stdout))
                    .await,
                exit_code(status),
            )
        }
    };
    match result {
        Ok(()) => Ok(code),
        Err(idem::engine::EngineError::Fenced(e)) => {
            eprintln!(
                "idem: this run was deposed while the command ran; its result was not recorded: {e}"
            );
            Ok(EX_FENCED)
        }
        Err(e) => Err(crate::engine_failure(e)),
    }
}
