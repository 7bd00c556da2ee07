//! idem's integration suite: one binary, one module per area.

mod cli;
mod engine;
mod exec_cli;
mod policy_runtime;
