//! `idem`: the command-line face of the idem library.
//!
//! Exit codes: 0 success; 1 a test failed (`idem test`) or some operations
//! did not complete (`idem run`); 2 bad usage or input (unreadable file,
//! malformed operation, a policy or store that cannot be opened); 3 the
//! policy refused the operation (a typed policy error); 4 the policy failed
//! while evaluating (trap, fuel, memory, deadline, malformed output or an
//! unsafe decision). `idem exec` exits with the command's status (also when
//! replaying it), or: 65 conflict (the key was used for another request),
//! 70 the command was killed (outcome unknown), 75 in progress elsewhere
//! (try later), 76 this run was deposed and its result not recorded,
//! 77 the policy rejected the duplicate. `idem run --job-lease NAME` exits
//! 75 when another live run holds the job lease (it did nothing).

mod command;
mod demo;
mod exec;
mod finisher;
mod inspect;
mod key;
mod policy_args;
mod run_cmd;
mod run_flags;
mod store_args;
mod test_cmd;

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

#[derive(Subcommand)]
enum Command {
    /// Derive the key, fingerprint and partition of one operation.
    Key(key::KeyArgs),
    /// Run a cases file against a built policy.
    Test(test_cmd::TestArgs),
    /// Show what a policy says it is, and its digest.
    Describe(policy_args::DescribeArgs),
    /// Run a command at most once per key.
    Exec(exec::ExecArgs),
    /// Run every operation of a JSONL file through a command, at most once per key.
    Run(run_cmd::RunArgs),
    /// Show the records a store holds.
    Inspect(inspect::InspectArgs),
    /// Remove records past their retention.
    Gc(inspect::GcArgs),
    /// Run the nightly billing job twice, overlapping with a pause: a lease lock alone vs idem.
    Demo(demo::DemoArgs),
    /// Create a store or bring its schema up to date.
    Migrate(inspect::MigrateArgs),
}

/// A command's failure: the message for stderr and the exit code.
pub struct Failure {
    pub code: u8,
    pub message: String,
}

impl Failure {
    /// Bad usage or input (exit 2).
    pub fn input(message: impl std::fmt::Display) -> Self {
        Failure {
            code: 2,
            message: message.to_string(),
        }
    }
}

/// The exit code and message for an engine error.
pub fn engine_failure(e: idem::engine::EngineError) -> Failure {
    use idem::engine::EngineError as E;
    let code = match &e {
        E::Operation(_) | E::Store(_) => 2,
        E::Refused(_) => 3,
        E::Policy(_) => 4,
        E::Fenced(_) => command::EX_FENCED,
    };
    Failure {
        code,
        message: e.to_string(),
    }
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_env("IDEM_LOG"))
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Key(args) => key::run(args),
        Command::Test(args) => test_cmd::run(args),
        Command::Describe(args) => policy_args::describe(args),
        Command::Exec(args) => exec::run(args),
        Command::Run(args) => run_cmd::run(args),
        Command::Inspect(args) => inspect::inspect(args),
        Command::Gc(args) => inspect::gc(args),
        Command::Demo(args) => demo::run(args),
        Command::Migrate(args) => inspect::migrate(args),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(f) => {
            eprintln!("idem: {}", f.message);
            ExitCode::from(f.code)
        }
    }
}
