//! Typed errors of the policy runtime.

use thiserror::Error;

/// Why a policy could not be loaded. The host refuses it and carries on.
#[derive(Debug, Error)]
pub enum LoadError {
    #[error("cannot read policy {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("policy is {size} bytes; the limit is {limit} bytes")]
    TooLarge { size: usize, limit: usize },
    #[error(
        "not a WebAssembly file ({why}); a policy is a component built from a crate using the idem-policy SDK"
    )]
    NotWasm { why: String },
    #[error(
        "this is a core WebAssembly module, not a component; build policies with `cargo xtask build-policy` (or wrap the module with `wasm-tools component new`)"
    )]
    CoreModule,
    #[error(
        "this is a precompiled artifact; idem compiles policies itself and never accepts precompiled code from outside"
    )]
    Precompiled,
    #[error("the component is invalid: {0}")]
    Invalid(String),
    #[error(
        "policy imports `{import}`; policies may import nothing (no WASI: no clock, randomness, environment, files or network)"
    )]
    ForbiddenImport { import: String },
    #[error(
        "policy exports {found}; this host speaks {supported} (a compatible 0.1.x version is needed)"
    )]
    IncompatibleVersion { found: String, supported: String },
    #[error(
        "policy does not export the `{supported}` interface (it exports: {exports}); is it built with the idem-policy SDK?"
    )]
    WrongWorld { supported: String, exports: String },
    #[error("policy could not be instantiated: {0}")]
    Instantiate(String),
    #[error("policy's describe() failed: {0}")]
    Describe(#[source] Box<EvalError>),
    #[error("policy describes itself badly: {0}")]
    BadDescription(String),
    #[error("cannot set up the policy runtime: {0}")]
    Runtime(String),
}

/// Why one evaluation failed. Never a key.
#[derive(Debug, Error)]
pub enum EvalError {
    #[error("policy trapped: {message}")]
    Trap { message: String },
    #[error(
        "policy ran out of fuel (limit {limit}): an endless loop, or far more work than a policy should do"
    )]
    OutOfFuel { limit: u64 },
    #[error(
        "policy exceeded its memory limit: it asked for {requested} bytes; the limit is {limit} bytes"
    )]
    MemoryLimit { requested: usize, limit: usize },
    #[error("policy exceeded its wall-clock deadline of {ms} ms")]
    Deadline { ms: u128 },
    #[error("{0}")]
    Operation(#[from] idem_core::OpError),
    #[error("{0}")]
    Malformed(#[from] idem_core::DerivationError),
    #[error("unsafe decision refused (the duplicate is rejected instead): {0}")]
    Unsafe(#[from] idem_core::UnsafeDecision),
    #[error("cannot start an evaluation: {0}")]
    Instantiate(String),
}
