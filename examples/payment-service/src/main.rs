//! `payment-service`: an axum payment service behind the idem HTTP layer,
//! a nightly billing job through the library's job runner on the same
//! store, and the fake payment provider both call. See the README beside
//! this crate for the whole flow with curl.

mod client;
mod nightly;
mod provider;
mod service;

use std::net::SocketAddr;
use std::time::Duration;

use clap::{Parser, Subcommand};

/// The example's command line.
#[derive(Debug, Parser)]
#[command(name = "payment-service", about = "An example payment service on idem")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// The service: `POST /charges` through the Idempotency-Key layer.
    Serve(service::ServeArgs),
    /// The nightly billing job: every invoice of OPS charged once.
    Nightly(nightly::NightlyArgs),
    /// The fake payment provider on its own.
    Provider(ProviderArgs),
}

/// Flags of `payment-service provider`.
#[derive(Debug, clap::Args)]
struct ProviderArgs {
    /// Where to listen (port 0: any free port; the address is printed).
    #[arg(long, default_value = "127.0.0.1:4001")]
    listen: SocketAddr,
    /// How long each new charge takes before the provider answers.
    #[arg(long, default_value = "0ms", value_parser = humantime::parse_duration)]
    delay: Duration,
    /// Where the provider's gate keeps its keys: `memory:` (default),
    /// `sqlite:PATH` or `postgres://USER@HOST/DB`.
    #[arg(long, default_value = "memory:")]
    gate_store: String,
}

/// The flags that name the store, shared by `serve` and `nightly`.
#[derive(Debug, Clone, clap::Args)]
struct StoreArgs {
    /// The idem store: `sqlite:PATH` (default) or `postgres://USER@HOST/DB`.
    #[arg(long, env = "IDEM_STORE", default_value = "sqlite:payment-service.db")]
    store: String,
}

/// Loads a policy component, naming the file when it cannot.
fn load_policy(path: &std::path::Path) -> Result<idem::policy::LoadedPolicy, String> {
    let runtime = idem::policy::PolicyRuntime::new(idem::policy::RuntimeConfig::default())
        .map_err(|e| format!("cannot start the policy runtime: {e}"))?;
    runtime.load_file(path).map_err(|e| {
        format!(
            "cannot load the policy {}: {e} (build the example policies with `cargo xtask build`)",
            path.display()
        )
    })
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("IDEM_LOG")
                .unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let result = match Cli::parse().command {
        Command::Serve(args) => service::serve(args).await,
        Command::Nightly(args) => nightly::run(args).await,
        Command::Provider(args) => match provider::gate_store(&args.gate_store).await {
            Ok(store) => provider::serve(args.listen, args.delay, store).await,
            Err(e) => Err(e),
        },
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("payment-service: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
