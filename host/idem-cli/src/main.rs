//! `idem`: the command-line face of the idem library.
//!
//! One module per subcommand ([`subcommand`]); the flag groups several
//! share ([`policy_args`], [`store_args`], [`run_flags`]); the user's command
//! under a claim ([`user_command`]), or long-lived workers fed one operation
//! a line ([`worker`]); the operations file read line by line, twice
//! ([`ops_file`]).
//!
//! Exit statuses are defined, each with its meaning, in [`exit`]; in short:
//! [`exit::SUCCESS`] 0; [`exit::INCOMPLETE`] 1 (a test case failed, some
//! operations did not complete, no such record); [`exit::BAD_INPUT`] 2 (bad
//! usage or input: unreadable file, malformed operation, a policy or store
//! that cannot be opened); [`exit::POLICY_REFUSED`] 3 (a typed policy
//! error); [`exit::POLICY_FAILED`] 4 (trap, fuel, memory, deadline,
//! malformed output or an unsafe decision). `idem exec` exits with the
//! command's status (also when replaying it), or: [`exit::CONFLICT`] 65
//! (the key was used for another request), [`exit::OUTCOME_UNKNOWN`] 70
//! (the command was killed), [`exit::TRY_LATER`] 75 (in progress
//! elsewhere), [`exit::DEPOSED`] 76 (this run was deposed and its result
//! not recorded), [`exit::REJECTED`] 77 (the policy rejected the
//! duplicate). `idem run --job-lease NAME` exits [`exit::JOB_LEASE_HELD`]
//! (75, the same "try later") when another live run holds the job lease.

mod command_effect;
mod exit;
mod input;
mod ops_file;
mod policy_args;
mod record_key;
mod report;
mod run_flags;
mod shown;
mod store_args;
mod subcommand;
#[cfg(feature = "otel")]
mod trace_export;
mod user_command;
mod when;
mod worker;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "idem",
    version,
    about = "Make side effects happen exactly once",
    propagate_version = true
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

// Parsed once and matched once: a variant's size costs nothing worth a box.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Command {
    /// Write a new policy project (Rust, JavaScript or Python) and its cases file from a template.
    New(subcommand::new::NewArgs),
    /// Build a policy project (Rust, JavaScript or Python) into a component (.wasm).
    Build(subcommand::build::BuildArgs),
    /// Derive the key, fingerprint and partition of one operation.
    Key(subcommand::key::KeyArgs),
    /// Run a cases file against a built policy.
    Test(subcommand::test::TestArgs),
    /// Show what a policy says it is, and its digest.
    Describe(subcommand::describe::DescribeArgs),
    /// Run a command at most once per key.
    Exec(subcommand::exec::ExecArgs),
    /// Run every operation of a JSONL file through a command, at most once per key.
    Run(subcommand::run::RunArgs),
    /// Run each message of a NATS JetStream stream through a command, at most once per key.
    Consume(subcommand::consume::ConsumeArgs),
    /// Show the records a store holds.
    Inspect(subcommand::inspect::InspectArgs),
    /// Why did it run twice: the duplicates in the attempt log by cause.
    Report(subcommand::report::ReportArgs),
    /// List the records waiting for a person: outcome unknown, or in progress past their lease.
    Review(subcommand::review::ReviewArgs),
    /// Settle a record waiting for review: completed, released or rejected.
    Resolve(subcommand::resolve::ResolveArgs),
    /// Remove records past their retention.
    Gc(subcommand::gc::GcArgs),
    /// Run the nightly billing job twice, overlapping with a pause: a lease lock alone vs idem.
    Demo(subcommand::demo::DemoArgs),
    /// What an upgrade of a policy changes: keys, fingerprints, partitions, and why.
    Diff(subcommand::diff::DiffArgs),
    /// A store's policy registry: activate (gate + diff), list, rollback, require-registration.
    Policy(subcommand::policy::PolicyArgs),
    /// Create a store or bring its schema up to date.
    Migrate(subcommand::migrate::MigrateArgs),
    /// The cache of compiled policies: prune it to a size.
    Cache(subcommand::cache::CacheArgs),
    /// Serve a JSON API over HTTP (derive, begin, complete, fail, heartbeat, resolve, report) for services in any language.
    Serve(subcommand::serve::ServeArgs),
}

fn main() -> ExitCode {
    // Without IDEM_LOG: errors, and the sidecar's warnings about its
    // connections (a full file table, a flood over the cap). Colour only on
    // a terminal: a log file gets no escape codes.
    // Each layer filters for itself: IDEM_LOG says what is logged, not
    // what is traced.
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    let filter = tracing_subscriber::EnvFilter::try_from_env("IDEM_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("error,idem_serve=warn"));
    let log = tracing_subscriber::fmt::layer()
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .with_filter(filter);
    let registry = tracing_subscriber::registry().with(log);
    #[cfg(feature = "otel")]
    let exporting = {
        let (traces, exporting) = trace_export::layer().unzip();
        registry.with(traces).init();
        exporting
    };
    #[cfg(not(feature = "otel"))]
    registry.init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::New(args) => subcommand::new::run(args),
        Command::Build(args) => subcommand::build::run(args),
        Command::Key(args) => subcommand::key::run(args),
        Command::Test(args) => subcommand::test::run(args),
        Command::Describe(args) => subcommand::describe::run(args),
        Command::Exec(args) => subcommand::exec::run(args),
        Command::Run(args) => subcommand::run::run(args),
        Command::Consume(args) => subcommand::consume::run(args),
        Command::Inspect(args) => subcommand::inspect::run(args),
        Command::Report(args) => subcommand::report::run(args),
        Command::Review(args) => subcommand::review::run(args),
        Command::Resolve(args) => subcommand::resolve::run(args),
        Command::Gc(args) => subcommand::gc::run(args),
        Command::Demo(args) => subcommand::demo::run(args),
        Command::Migrate(args) => subcommand::migrate::run(args),
        Command::Serve(args) => subcommand::serve::run(args),
        Command::Diff(args) => subcommand::diff::run(args),
        Command::Policy(args) => subcommand::policy::run(args),
        Command::Cache(args) => subcommand::cache::run(args),
    };
    // Every command that returns here (serve after its drain) flushes the
    // spans it made.
    #[cfg(feature = "otel")]
    if let Some(exporting) = exporting {
        exporting.shutdown();
    }
    match result {
        Ok(code) => ExitCode::from(code),
        Err(f) => {
            shown::tell!("idem: {}", f.message);
            ExitCode::from(f.code)
        }
    }
}
