//! Limits and settings of the policy runtime.

use std::path::PathBuf;
use std::time::Duration;

use idem_core::OperationLimits;

/// What one evaluation (one call into a policy) may use. A policy that
/// exceeds a limit fails that evaluation alone, with a typed error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Fuel per evaluation: deterministic, so the same policy and input
    /// always stop at the same point. The default leaves a wide margin over
    /// what a derive uses, even one heavy in SHA-256; `idem key` and `idem
    /// test` print what a policy actually uses.
    pub fuel: u64,
    /// Linear memory per evaluation, in bytes.
    pub memory_bytes: usize,
    /// Table elements per evaluation.
    pub table_elements: usize,
    /// Wall-clock backstop (epoch interruption) in case fuel metering is
    /// somehow not enough: for example a host call that blocks.
    pub deadline: Duration,
    /// Limits on the operations handed to a policy.
    pub operation: OperationLimits,
    /// Largest policy component accepted, in bytes. The default takes a
    /// Python policy (CPython inside: about 19 MB) with room to spare.
    pub max_component_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            fuel: 50_000_000,
            memory_bytes: 16 << 20,
            table_elements: 10_000,
            deadline: Duration::from_secs(1),
            operation: OperationLimits::default(),
            max_component_bytes: 32 << 20,
        }
    }
}

/// Settings of a [`PolicyRuntime`](super::PolicyRuntime).
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// What each evaluation may use.
    pub limits: Limits,
    /// Where precompiled artifacts are cached; `None` compiles every load.
    pub cache_dir: Option<PathBuf>,
    /// The most the cache keeps, in bytes (default 1 GiB): after each
    /// artifact it writes, the least recently used go until the rest fit.
    /// A JavaScript or Python policy's artifact is tens of MB, one per
    /// build: without a bound the cache grows with every edit.
    pub cache_max_bytes: u64,
    /// Most evaluations running at once (sizes the instance pool); more
    /// wait for a slot.
    pub max_concurrent_evaluations: u32,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            limits: Limits::default(),
            cache_dir: default_cache_dir(),
            cache_max_bytes: DEFAULT_CACHE_MAX_BYTES,
            max_concurrent_evaluations: 128,
        }
    }
}

/// [`RuntimeConfig::cache_max_bytes`]'s default: 1 GiB.
pub const DEFAULT_CACHE_MAX_BYTES: u64 = 1 << 30;

/// `$IDEM_CACHE_DIR`, else `$XDG_CACHE_HOME/idem`, else `~/.cache/idem`.
pub fn default_cache_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("IDEM_CACHE_DIR") {
        return Some(PathBuf::from(dir));
    }
    if let Some(dir) = std::env::var_os("XDG_CACHE_HOME") {
        return Some(PathBuf::from(dir).join("idem"));
    }
    std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache").join("idem"))
}
