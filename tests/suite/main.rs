//! idem's integration suite: one binary, one module per area.

mod authoring;
mod chaos;
mod cli;
mod determinism;
mod docs;
mod engine;
mod examples;
mod exec_cli;
mod faults;
mod fleet;
mod forensics;
mod guest_languages;
mod hardening;
mod job;
mod lifecycle;
mod operators;
mod outage;
mod ownership;
mod policy_runtime;
mod ports;
mod report_cli;
mod report_page;
mod run_cli;
mod serve;
mod serve_connections;
mod serve_contract;
