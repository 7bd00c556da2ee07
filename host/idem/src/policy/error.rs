//! Typed errors of the policy runtime.

use thiserror::Error;

/// Why a policy could not be loaded. The host refuses it and carries on.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum LoadError {
    /// The policy file could not be read.
    #[error("cannot read policy {path}: {source}")]
    Read {
        /// The file, as given.
        path: String,
        /// Why reading failed.
        source: std::io::Error,
    },
    /// The component is larger than
    /// [`Limits::max_component_bytes`](super::Limits::max_component_bytes).
    #[error("policy is {size} bytes; the limit is {limit} bytes")]
    TooLarge {
        /// The component's size, in bytes.
        size: usize,
        /// The limit it exceeds, in bytes.
        limit: usize,
    },
    /// The bytes are not WebAssembly at all: too short, no `\0asm` magic, or
    /// an unknown version.
    #[error(
        "not a WebAssembly file ({why}); a policy is a component built from a crate using the idem-policy SDK"
    )]
    NotWasm {
        /// What the header shows instead.
        why: String,
    },
    /// A core WebAssembly module, not yet wrapped into a component.
    #[error(
        "this is a core WebAssembly module, not a component; build policies with `idem build` (or wrap the module with `wasm-tools component new`)"
    )]
    CoreModule,
    /// Native code precompiled outside this host (an ELF file). Only
    /// artifacts this host compiled and cached itself are ever loaded.
    #[error(
        "this is a precompiled artifact; idem compiles policies itself and never accepts precompiled code from outside"
    )]
    Precompiled,
    /// A component by its header, but wasmtime refused to validate or
    /// compile it; the message says why.
    #[error("the component is invalid: {0}")]
    Invalid(String),
    /// The component imports something. A policy imports nothing but the
    /// contract's `diagnostics`, which the host provides.
    #[error(
        "policy imports {}; policies may import nothing but `idem:policy/diagnostics` (no WASI: no clock, randomness, environment, files or network)",
        imports.iter().map(|i| format!("`{i}`")).collect::<Vec<_>>().join(", ")
    )]
    ForbiddenImport {
        /// Every import the component declares, in its order.
        imports: Vec<String>,
    },
    /// The component exports the policy interface at a version this host
    /// does not speak.
    #[error(
        "policy exports {found}; this host speaks {supported} (a compatible 0.1.x version is needed)"
    )]
    IncompatibleVersion {
        /// The versioned interface the component exports.
        found: String,
        /// The interface this host speaks, [`POLICY_INTERFACE`](super::POLICY_INTERFACE).
        supported: String,
    },
    /// The component does not export the policy interface at all.
    #[error(
        "policy does not export the `{supported}` interface (it exports: {exports}); is it built with the idem-policy SDK?"
    )]
    WrongWorld {
        /// The interface this host speaks, [`POLICY_INTERFACE`](super::POLICY_INTERFACE).
        supported: String,
        /// What the component exports instead, comma-separated, or
        /// `nothing`.
        exports: String,
    },
    /// The component could not be prepared for instantiation.
    #[error("policy could not be instantiated: {0}")]
    Instantiate(String),
    /// Evaluating the policy's `describe` failed (trap, limit).
    #[error("policy's describe() failed: {0}")]
    Describe(#[source] Box<EvalError>),
    /// The policy's description fails the host's checks (empty name or
    /// namespace, a version that is not semantic, ...).
    #[error("policy describes itself badly: {0}")]
    BadDescription(String),
    /// A custom section the host reads (the lifecycle manifest, the golden
    /// vectors) is malformed or given twice.
    #[error("policy's `{section}` section is refused: {why}")]
    BadSection {
        /// The section's name.
        section: String,
        /// What is wrong with it.
        why: String,
    },
    /// The wasmtime engine could not be built with the runtime's settings.
    #[error("cannot set up the policy runtime: {0}")]
    Runtime(String),
}

/// Why one evaluation failed. Never a key.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum EvalError {
    /// The policy trapped: a panic, `unreachable`, a stack overflow or
    /// another wasm fault.
    #[error("policy trapped: {message}")]
    Trap {
        /// What trapped, as far as the host can tell (a policy that said why
        /// first is [`EvalError::Failed`] instead).
        message: String,
    },
    /// The policy failed and said why before it trapped (through the
    /// contract's `diagnostics` import): a JavaScript or Python policy's
    /// uncaught exception, with its file and line.
    #[error("uncaught in the policy: {message}")]
    Failed {
        /// The policy's own words, cut to
        /// [`MAX_SAID_BYTES`](super::MAX_SAID_BYTES) and escaped (control
        /// and bidirectional characters spelt `\u{…}`).
        message: String,
        /// The trap that followed, as [`EvalError::Trap`] would say it.
        trap: String,
    },
    /// The evaluation used up its fuel.
    #[error(
        "policy ran out of fuel (limit {limit}): an endless loop, or far more work than a policy should do"
    )]
    OutOfFuel {
        /// The fuel limit, [`Limits::fuel`](super::Limits::fuel).
        limit: u64,
    },
    /// The policy tried to grow its linear memory past the limit.
    #[error(
        "policy exceeded its memory limit: it asked for {requested} bytes; the limit is {limit} bytes"
    )]
    MemoryLimit {
        /// The memory size it asked to grow to, in bytes.
        requested: usize,
        /// The limit, [`Limits::memory_bytes`](super::Limits::memory_bytes).
        limit: usize,
    },
    /// The wall-clock backstop interrupted the evaluation.
    #[error(
        "policy exceeded its wall-clock deadline of {deadline_ms} ms (interrupted after {elapsed_ms} ms)"
    )]
    Deadline {
        /// The deadline, [`Limits::deadline`](super::Limits::deadline), in
        /// milliseconds.
        deadline_ms: u128,
        /// Milliseconds elapsed when it was interrupted, at least the
        /// deadline.
        elapsed_ms: u128,
    },
    /// The operation is too large to hand to a policy.
    #[error("{0}")]
    Operation(#[from] idem_core::OpError),
    /// The policy returned a derivation the contract does not allow.
    #[error("{0}")]
    Malformed(#[from] idem_core::DerivationError),
    /// The safety gate refused the policy's decision for a duplicate.
    #[error("unsafe decision refused (the duplicate is rejected instead): {0}")]
    Unsafe(#[from] idem_core::UnsafeDecision),
    /// The evaluation's store could not be set up.
    #[error("cannot start an evaluation: {0}")]
    Instantiate(String),
}
