//! idem's integration suite: one binary, one module per area.

mod cli;
mod policy_runtime;
