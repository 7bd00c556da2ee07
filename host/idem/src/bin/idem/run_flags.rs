//! Flags shared by `idem exec` and `idem run`.

use std::time::Duration;

use clap::Args;
use idem::core::{Operation, RunContext, Trigger};
use idem::engine::EngineOptions;

/// How a run is labelled and how claims behave.
#[derive(Args, Debug, Clone)]
pub struct RunFlags {
    /// The run these operations belong to (recorded as provenance; replaces
    /// the operation's own `run.run_id`).
    #[arg(long, value_name = "ID")]
    pub run_id: Option<String>,
    /// Why this run happens: scheduled, retry, manual or client.
    #[arg(long, value_name = "T")]
    pub trigger: Option<Trigger>,
    /// The run's attempt number (1 for the first).
    #[arg(long, value_name = "N")]
    pub attempt: Option<u32>,
    /// Override the policy's lease for this run, e.g. `90s`, `10m`.
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub lease: Option<Duration>,
    /// Exit statuses that mean a permanent failure (replayed to duplicates);
    /// any other non-zero status is retryable. Comma-separated.
    #[arg(long, value_name = "CODES", value_delimiter = ',')]
    pub permanent_exit_codes: Vec<i32>,
}

impl RunFlags {
    /// Applies `--run-id`, `--trigger` and `--attempt` to an operation.
    pub fn apply(&self, op: &mut Operation) {
        if self.run_id.is_none() && self.trigger.is_none() && self.attempt.is_none() {
            return;
        }
        let current = op.run.clone();
        op.run = Some(RunContext {
            run_id: self
                .run_id
                .clone()
                .or_else(|| current.as_ref().map(|r| r.run_id.clone()))
                .unwrap_or_else(|| "cli".to_string()),
            trigger: self
                .trigger
                .or(current.as_ref().map(|r| r.trigger))
                .unwrap_or(Trigger::Manual),
            attempt: self
                .attempt
                .or(current.as_ref().map(|r| r.attempt))
                .unwrap_or(1),
        });
    }

    /// The engine settings these flags ask for.
    pub fn engine_options(&self) -> EngineOptions {
        EngineOptions {
            lease: self.lease,
            ..EngineOptions::default()
        }
    }

    /// Whether a command's exit status is a permanent failure.
    pub fn is_permanent(&self, status: i32) -> bool {
        self.permanent_exit_codes.contains(&status)
    }
}
