//! A policy's life across versions: no silent key change.
//!
//! A key is stored state: a version 2 that derives another key for an
//! operation version 1 already recorded would run that effect again. This
//! module is how the host sees it coming:
//!
//! - [`diff`]: every operation of a corpus, or every record a store keeps
//!   within retention (from the canonical operation kept with it), derived
//!   with both versions; each key, fingerprint or partition that changes,
//!   grouped by the named part that explains it ([`material`]).
//! - [`gate`]: the golden vectors a policy carries (its own cases file, as
//!   a custom section) run before it may become active.
//! - [`swap`]: a policy swapped inside a running service ([`HotEngine`]):
//!   validate, precompile, vectors, diff, then an atomic swap, the previous
//!   version kept warm for an instant rollback.

pub mod diff;
pub mod gate;
pub mod material;
pub mod swap;

pub use diff::{Aspect, DiffReport, Differ, diff_store};
pub use gate::{GateError, run_golden_vectors};
pub use swap::{HotEngine, Prepared, SwapCheck, SwapError};
