//! `idem`: the command-line face of the idem library.
//!
//! Exit codes: 0 success; 1 a test failed (`idem test`); 2 bad usage or
//! input (unreadable file, malformed operation, a policy that cannot be
//! loaded); 3 the policy refused the operation (a typed policy error);
//! 4 the policy failed while evaluating (trap, fuel, memory, deadline,
//! malformed output).

mod key;
mod policy_args;
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
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(f) => {
            eprintln!("idem: {}", f.message);
            ExitCode::from(f.code)
        }
    }
}
