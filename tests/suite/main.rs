//! idem's integration suite: one binary, one module per area.

mod chaos;
mod cli;
mod engine;
mod exec_cli;
mod fleet;
mod job;
mod ownership;
mod policy_runtime;
mod run_cli;
