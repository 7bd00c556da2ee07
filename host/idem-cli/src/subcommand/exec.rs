//! `idem exec`: run a command at most once per key.

use std::path::PathBuf;

use clap::Args;
use idem::engine::{Begin, Engine, EngineError};
use idem::job::{Performed, run_effect};
use idem_core::Operation;

use crate::exit::{self, Failure, engine_failure};
use crate::input::read_op_bytes;
use crate::policy_args::PolicyArgs;
use crate::run_flags::RunFlags;
use crate::store_args::{StoreArgs, runtime};
use crate::user_command::UserCommand;

/// `idem exec`'s flags.
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

/// Runs `idem exec`.
pub fn run(args: ExecArgs) -> Result<u8, Failure> {
    let policy = args.policy.load()?;
    let bytes = read_op_bytes(&args.op)?;
    let mut op = Operation::from_slice(&bytes, &policy.limits().operation)
        .map_err(|e| Failure::input(format!("{}: {e}", args.op.display())))?;
    args.run.apply(&mut op);
    runtime()?.block_on(async {
        let store = args.store.open().await?;
        let engine = Engine::new(policy, store, args.run.engine_options());
        let code = exec(&engine, &op, &args).await;
        // The answer this call got (a replay, a conflict…) into the
        // attempt log before the process ends.
        engine.flush_log().await;
        code
    })
}

async fn exec(engine: &Engine, op: &Operation, args: &ExecArgs) -> Result<u8, Failure> {
    let begun = engine.begin(op).await.map_err(engine_failure)?;
    let execution = match begun {
        Begin::Execute(e) => e,
        Begin::Replay(r) => {
            eprintln!(
                "idem: replaying the {} outcome of key {} (fence {}): the command does not run again",
                r.state.as_str(),
                r.key.digest,
                r.fence
            );
            use std::io::Write;
            let mut out = std::io::stdout();
            let _ = out.write_all(&r.outcome.body);
            let _ = out.flush();
            return Ok(exit::from_status(r.outcome.status));
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
                key.digest
            );
            return Ok(exit::TRY_LATER);
        }
        Begin::Conflict {
            key,
            status,
            reason,
        } => {
            eprintln!("idem: conflict ({status}) on key {}: {reason}", key.digest);
            return Ok(exit::CONFLICT);
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
                key.digest
            );
            return Ok(exit::REJECTED);
        }
    };
    let command = UserCommand {
        argv: args.command.clone(),
        forward_stdout: true,
        op_on_stdin: false,
        permanent_exit_codes: args.run.permanent_exit_codes.clone(),
    };
    let key = execution.key_hex();
    match run_effect(&command, op.clone(), execution).await {
        // Nothing happened: the claim was recorded failed-retryable.
        Ok(Performed::NotStarted { reason }) => Err(Failure::input(reason)),
        Ok(Performed::Unknown { reason }) => {
            eprintln!(
                "idem: {reason}; key {key} stays claimed until its lease expires, then goes to the policy (its outcome is unknown)"
            );
            Ok(exit::OUTCOME_UNKNOWN)
        }
        Ok(Performed::Completed) => Ok(exit::SUCCESS),
        Ok(Performed::Failed { status, .. }) => Ok(exit::from_status(status)),
        Err(EngineError::Fenced(e)) => {
            eprintln!(
                "idem: this run was deposed while the command ran; its result was not recorded: {e}"
            );
            Ok(exit::DEPOSED)
        }
        Err(e) => Err(engine_failure(e)),
    }
}
