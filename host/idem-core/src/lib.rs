//! The idem contract in plain Rust.
//!
//! Everything both sides of the policy boundary must agree on lives here, so
//! that the host (running a policy as WebAssembly) and the guest SDK (running
//! the same policy natively in unit tests) compute byte-identical keys:
//!
//! - [`operation`]: the operation JSON format and its canonical form,
//! - [`digest`]: key and fingerprint material ([`Part`]) and how it becomes
//!   SHA-256 keys (depends on no other module here),
//! - [`derivation`]: what a policy derives and the checks it must pass (built
//!   on [`digest`]),
//! - [`duplicate`]: what a duplicate may get, and the safety gate that
//!   refuses an unsafe decision,
//! - [`cases`]: the cases-file format shared by `idem test` and the SDK.
//! - [`json`]: one meaning per JSON document (a repeated member name is an
//!   error).
//! - [`ownership`]: which worker owns a partition (rendezvous hashing).
//!
//! This crate knows nothing of WebAssembly or storage.

#![warn(missing_docs)]

pub mod cases;
pub mod derivation;
pub mod digest;
pub mod duplicate;
pub mod json;
pub mod lifecycle;
pub mod number;
pub mod operation;
pub mod ownership;
pub mod policy_error;
pub mod text;

pub use derivation::{Derivation, DerivationError, KeyedDerivation, PolicyInfo};
pub use digest::{Digest, KEY_ENCODING_VERSION, Part};
pub use duplicate::{
    Decision, DuplicateContext, OutcomeSummary, RecordState, Rejection, UnsafeDecision,
    check_decision,
};
pub use lifecycle::Lifecycle;
pub use operation::{
    OpError, Operation, OperationBuilder, OperationLimits, RunContext, Trigger, Value,
};
pub use policy_error::{ErrorCode, PolicyError};
