//! The effect `idem run` and `idem consume` run for each operation: the
//! user's command started once per operation, or long-lived workers fed
//! one operation per line (`--worker`, the worker protocol).

use idem::engine::ExecContext;
use idem::job::{Effect, EffectOutcome};
use idem_core::Operation;

use crate::user_command::UserCommand;
use crate::worker::WorkerPool;

/// A process per operation, or a pool of workers (a handle: clones share
/// the pool).
#[derive(Clone)]
pub enum CommandEffect {
    /// `argv` started for each operation, which it reads on stdin.
    PerOperation(UserCommand),
    /// `argv` started once per slot and fed every operation.
    Workers(WorkerPool),
}

impl CommandEffect {
    /// `argv` run per operation, or (`worker`) as `slots` workers; exit
    /// statuses in `permanent_exit_codes` are permanent failures.
    pub fn new(argv: &[String], worker: bool, slots: usize, permanent_exit_codes: &[i32]) -> Self {
        if worker {
            CommandEffect::Workers(WorkerPool::new(
                argv.to_vec(),
                slots,
                permanent_exit_codes.to_vec(),
            ))
        } else {
            CommandEffect::PerOperation(UserCommand {
                argv: argv.to_vec(),
                forward_stdout: false,
                held_stdout: None,
                op_on_stdin: true,
                permanent_exit_codes: permanent_exit_codes.to_vec(),
            })
        }
    }

    /// Ends the workers once the run is over (nothing to do per
    /// operation), naming on stderr each that did not end cleanly.
    pub async fn shutdown(&self) {
        if let CommandEffect::Workers(pool) = self {
            for complaint in pool.shutdown().await {
                eprintln!("idem: {complaint}");
            }
        }
    }
}

impl Effect for CommandEffect {
    async fn run(&self, op: Operation, ctx: ExecContext) -> EffectOutcome {
        match self {
            CommandEffect::PerOperation(command) => command.run(op, ctx).await,
            CommandEffect::Workers(pool) => pool.run(op, ctx).await,
        }
    }
}
