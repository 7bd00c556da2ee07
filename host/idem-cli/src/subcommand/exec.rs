//! `idem exec`: run a command at most once per key.

use std::path::PathBuf;

use clap::Args;
use idem::engine::{Begin, Engine, Execution};
use idem_core::Operation;

use crate::exit::{self, Failure, engine_failure};
use crate::input::read_op_bytes;
use crate::policy_args::PolicyArgs;
use crate::run_flags::RunFlags;
use crate::store_args::{StoreArgs, runtime};
use crate::user_command::{CommandSpec, Recorded, run_and_record};

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
        exec(&engine, &op, &args).await
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
                r.key.key,
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
                key.key
            );
            return Ok(exit::TRY_LATER);
        }
        Begin::Conflict {
            key,
            status,
            reason,
        } => {
            eprintln!("idem: conflict ({status}) on key {}: {reason}", key.key);
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
                key.key
            );
            return Ok(exit::REJECTED);
        }
    };
    let spec = CommandSpec {
        argv: &args.command,
        forward_stdout: true,
        stdin: None,
    };
    let key = execution.key_hex();
    let recorded = run_and_record(
        &spec,
        execution,
        &op.canonical_json(),
        |status| args.run.is_permanent(status),
        async |execution: Execution, ending, outcome| execution.finish(ending, outcome).await,
    )
    .await;
    match recorded {
        // Nothing happened: the claim was recorded failed-retryable.
        Ok(Recorded::NotStarted(message)) => Err(Failure::input(message)),
        Ok(Recorded::Killed { signal }) => {
            eprintln!(
                "idem: the command was killed by signal {signal}; key {key} stays claimed until its lease expires, then goes to the policy (its outcome is unknown)"
            );
            Ok(exit::OUTCOME_UNKNOWN)
        }
        Ok(Recorded::Completed) => Ok(exit::SUCCESS),
        Ok(Recorded::Failed { status }) => Ok(exit::from_status(status)),
        Err(idem::engine::EngineError::Fenced(e)) => {
            eprintln!(
                "idem: this run was deposed while the command ran; its result was not recorded: {e}"
            );
            Ok(exit::DEPOSED)
        }
        Err(e) => Err(engine_failure(e)),
    }
}
