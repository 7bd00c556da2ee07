//! Flags shared by every command that loads a policy.

use std::path::{Path, PathBuf};

use clap::Args;
use idem::policy::{LoadedPolicy, PolicyRuntime, RuntimeConfig, default_cache_dir};

use crate::exit::Failure;

/// Which policy, and how to run it.
#[derive(Args, Debug)]
pub struct PolicyArgs {
    /// The policy component (.wasm).
    #[arg(long, value_name = "P.wasm")]
    pub policy: PathBuf,
    #[command(flatten)]
    pub runtime: RuntimeArgs,
}

/// How to run policies (for commands that load one or several).
#[derive(Args, Debug, Clone)]
pub struct RuntimeArgs {
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
        self.runtime.runtime()?.load(&self.policy)
    }
}

/// A runtime and the messages of the CLI's loads.
pub struct Runtime(PolicyRuntime);

impl Runtime {
    /// Loads the policy at `path` (a warning on stderr when the cache was
    /// refused).
    pub fn load(&self, path: &Path) -> Result<LoadedPolicy, Failure> {
        let policy = self
            .0
            .load_file(path)
            .map_err(|e| Failure::input(format!("cannot load policy {}: {e}", path.display())))?;
        if let Some(warning) = policy.cache_warning() {
            eprintln!("idem: warning: {warning}");
        }
        Ok(policy)
    }

    /// Loads a component from its bytes (one a store kept).
    pub fn load_bytes(&self, bytes: &[u8]) -> Result<LoadedPolicy, Failure> {
        self.0
            .load_bytes(bytes)
            .map_err(|e| Failure::input(format!("cannot load a kept policy: {e}")))
    }
}

impl RuntimeArgs {
    /// Builds the runtime these flags describe.
    pub fn runtime(&self) -> Result<Runtime, Failure> {
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
        config.cache_max_bytes = crate::subcommand::cache::max_bytes_from_env()?;
        // A CLI run evaluates one thing at a time; a small pool starts faster.
        config.max_concurrent_evaluations = 4;
        Ok(Runtime(PolicyRuntime::new(config).map_err(Failure::input)?))
    }
}
