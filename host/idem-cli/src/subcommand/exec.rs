//! `idem exec`: run a command at most once per key.

use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;
use idem::engine::{Begin, Engine, EngineError};
use idem::job::{Performed, begin_riding_out, run_effect_riding_out};
use idem::policy::LoadedPolicy;
use idem_core::Operation;
use tracing::Instrument;

use crate::exit::{self, Failure, engine_failure};
use crate::input::read_op_bytes;
use crate::policy_args::PolicyArgs;
use crate::run_flags::RunFlags;
use crate::shown::tell;
use crate::store_args::{StoreArgs, runtime, told_gave_up, told_waiting};
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
    /// Hold the command's stdout (in memory) and write it only once its
    /// outcome is recorded: a run deposed while the command ran (exit 76),
    /// or a command killed (exit 70), prints nothing on stdout. Without it,
    /// stdout is passed through as the command prints, and only the exit
    /// status tells a recorded outcome from an unrecorded one.
    #[arg(long)]
    pub buffer_stdout: bool,
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
    derive_first(&policy, &op)?;
    runtime()?.block_on(async {
        // A store still starting (or failing over) is waited for as any
        // other outage, within --store-outage.
        let store = match args.store.open_riding_out(args.run.store_outage).await? {
            Ok(store) => store,
            Err(code) => return Ok(code),
        };
        let engine = Engine::new(policy, store, args.run.engine_options());
        // The operation's span, around its claim, command and end (the
        // engine's spans are its children).
        let span = tracing::info_span!(
            "idem.operation",
            idem.namespace = tracing::field::Empty,
            idem.key = tracing::field::Empty,
            idem.run_id = op
                .run
                .as_ref()
                .map(|r| idem_core::text::bounded(&r.run_id, idem::engine::MAX_ATTRIBUTE)),
            idem.run.attempt = op.run.as_ref().map(|r| r.attempt),
            process.exit.code = tracing::field::Empty,
        );
        let code = exec(&engine, &op, &args).instrument(span.clone()).await;
        if let Ok(code) = &code {
            span.record("process.exit.code", code);
        }
        // The answer this call got (a replay, a conflict…) into the
        // attempt log before the process ends.
        engine.flush_log().await;
        code
    })
}

/// Derives the operation's key before the store is opened (opening creates
/// and migrates a SQLite file): an operation the policy refuses or fails on
/// leaves nothing behind. The engine derives again under the store's clock;
/// a policy is a pure function of its input, so only a policy that reads
/// `now_ms` can answer the two differently.
fn derive_first(policy: &LoadedPolicy, op: &Operation) -> Result<(), Failure> {
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    match policy.derive(op, now_ms) {
        Ok(evaluated) => evaluated
            .value
            .map(drop)
            .map_err(|refused| engine_failure(EngineError::Refused(refused))),
        Err(failed) => Err(engine_failure(EngineError::Policy(failed))),
    }
}

async fn exec(engine: &Engine, op: &Operation, args: &ExecArgs) -> Result<u8, Failure> {
    let budget = args.run.store_outage;
    let waiting = |e: &EngineError| told_waiting(e, budget);
    let begun = match begin_riding_out(engine, op, budget, waiting).await {
        Ok(begun) => begun,
        Err(e) if e.is_store_unavailable() => return Ok(told_gave_up(&e, budget)),
        Err(e) => return Err(engine_failure(e)),
    };
    let span = tracing::Span::current();
    span.record("idem.namespace", begun.key().namespace.as_str());
    span.record("idem.key", begun.key().digest.to_string());
    // A command's usual duration is unknown here: the policy's hint when
    // shorter than the holder's lease, else the lease left (by then the
    // holder has ended, or the next run is the policy's to decide).
    let in_flight_after = begun.in_flight_retry_after_ms(std::time::Duration::MAX);
    let execution = match begun {
        Begin::Execute(e) => e,
        Begin::Replay(r) => {
            tell!(
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
        Begin::InProgress { key, reason, .. } => {
            let after = in_flight_after
                .map(|ms| format!("; retry after {ms} ms"))
                .unwrap_or_default();
            tell!(
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
            tell!("idem: conflict ({status}) on key {}: {reason}", key.digest);
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
            tell!(
                "idem: rejected ({status}) on key {}{review}: {reason}",
                key.digest
            );
            return Ok(exit::REJECTED);
        }
        // An answer this idem does not know (`Begin` is non-exhaustive):
        // nothing was claimed, so the command does not run.
        other => {
            return Err(Failure::input(format!(
                "the engine answered for key {} in a way this command does not know ({other:?}); the command did not run",
                other.key().digest
            )));
        }
    };
    let held = args.buffer_stdout.then(Arc::default);
    let command = UserCommand {
        argv: args.command.clone(),
        forward_stdout: true,
        held_stdout: held.clone(),
        op_on_stdin: false,
        permanent_exit_codes: args.run.permanent_exit_codes.clone(),
    };
    let key = execution.key_hex();
    let performed = run_effect_riding_out(&command, engine, op.clone(), execution, budget).await;
    // The outcome is recorded (or could not start, recording nothing it
    // printed): held output may go out now. Otherwise it is withheld.
    let recorded = matches!(
        performed,
        Ok(Performed::Completed | Performed::Failed { .. } | Performed::NotStarted { .. })
    );
    if let Some(held) = held {
        let bytes = std::mem::take(&mut *held.lock().unwrap_or_else(|p| p.into_inner()));
        if recorded {
            use std::io::Write;
            let mut out = std::io::stdout();
            let _ = out.write_all(&bytes);
            let _ = out.flush();
        } else if !bytes.is_empty() {
            tell!(
                "idem: the command's stdout ({} bytes) is withheld: its outcome was not recorded",
                bytes.len()
            );
        }
    }
    match performed {
        // Nothing happened: the claim was recorded failed-retryable.
        Ok(Performed::NotStarted { reason }) => Err(Failure::input(reason)),
        Ok(Performed::Unknown { reason }) => {
            tell!(
                "idem: {reason}; key {key} stays claimed until its lease expires, then goes to the policy (its outcome is unknown)"
            );
            Ok(exit::OUTCOME_UNKNOWN)
        }
        Ok(Performed::Completed) => Ok(exit::SUCCESS),
        Ok(Performed::Failed { status, .. }) => Ok(exit::from_status(status)),
        // An end this idem does not know (`Performed` is non-exhaustive):
        // the command ran, and how it was recorded cannot be said.
        Ok(other) => {
            tell!(
                "idem: the command ran and its end is one this idem does not know ({other:?}); check key {key} with `idem inspect`"
            );
            Ok(exit::OUTCOME_UNKNOWN)
        }
        Err(EngineError::Fenced(e)) => {
            tell!(
                "idem: this run was deposed while the command ran; its result was not recorded: {e}"
            );
            Ok(exit::DEPOSED)
        }
        // The command ran; its end could not be written in time.
        Err(EngineError::Store(e)) => {
            tell!(
                "idem: the command ran but its outcome could not be recorded: {e}; key {key} stays claimed until its lease expires, then goes to the policy (its outcome is unknown)"
            );
            Ok(exit::OUTCOME_UNKNOWN)
        }
        Err(e) => Err(engine_failure(e)),
    }
}
