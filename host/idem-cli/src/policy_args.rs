//! Flags shared by every command that loads a policy.

use std::path::PathBuf;

use clap::Args;
use idem::policy::{LoadedPolicy, PolicyRuntime, RuntimeConfig, default_cache_dir};

use crate::exit::Failure;

/// Which policy, and how to run it.
#[derive(Args, Debug)]
pub struct PolicyArgs {
    /// The policy component (.wasm).
    #[arg(long, value_name = "P.wasm")]
    pub policy: PathBuf,
    /// Fuel per evaluation (deterministic instruction budget).
    #[arg(long, value_name = "N")]
    pub fuel: Option<u64>,
    /// Linear memory per evaluation, in MiB.
    #[arg(long, value_name = "MIB")]
    pub memory_mib: Option<usize>,
    /// Where compiled policies are cached [default: $IDEM_CACHE_DIR, else ~/.cache/idem].
    #[arg(long, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
    /// Compile the policy on every run; never read or write the cache.
    #[arg(long)]
    pub no_cache: bool,
}

impl PolicyArgs {
    /// Builds the runtime these flags describe and loads the policy.
    pub fn load(&self) -> Result<LoadedPolicy, Failure> {
        let mut config = RuntimeConfig::default();
        if let Some(fuel) = self.fuel {
            config.limits.fuel = fuel;
        }
        if let Some(mib) = self.memory_mib {
            config.limits.memory_bytes = mib << 20;
        }
        config.cache_dir = if self.no_cache {
            None
        } else {
            self.cache_dir.clone().or_else(default_cache_dir)
        };
        // A CLI run evaluates one thing at a time; a small pool starts faster.
        config.max_concurrent_evaluations = 4;
        let runtime = PolicyRuntime::new(config).map_err(Failure::input)?;
        let policy = runtime.load_file(&self.policy).map_err(|e| {
            Failure::input(format!("cannot load policy {}: {e}", self.policy.display()))
        })?;
        if let Some(warning) = policy.cache_warning() {
            eprintln!("idem: warning: {warning}");
        }
        Ok(policy)
    }
}
