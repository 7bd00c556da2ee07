//! # idem-policy: write an idempotency policy for idem
//!
//! A policy tells the idem host, for every operation, **what identifies its
//! effect** (the key material), **what must match for a duplicate to be a true
//! replay** (the fingerprint material), who owns it (the partition), how long
//! to remember it and how long a claim holds, and, for every duplicate, **what
//! the duplicate gets**. The host, never the policy, hashes the material into
//! keys and enforces deduplication against storage.
//!
//! ```ignore
//! use idem_policy::*;
//!
//! struct Charges;
//!
//! impl Policy for Charges {
//!     fn describe() -> PolicyInfo {
//!         PolicyInfo::new("charges", "1.0.0", "billing", "One charge per invoice")
//!     }
//!     fn derive(op: &Operation) -> Result<Derivation, PolicyError> {
//!         let customer = op.text("customer")?;
//!         Ok(Derivation::new(customer)
//!             .key("customer", customer)
//!             .key("invoice_id", op.text("invoice_id")?)
//!             .fingerprint("amount", op.material("amount")?)
//!             .retention_s(400 * DAY)
//!             .lease_s(5 * MINUTE as u32))
//!     }
//!     fn on_duplicate(ctx: &DuplicateContext) -> Decision {
//!         Decision::standard(ctx)
//!     }
//! }
//!
//! export_policy!(Charges);
//! ```
//!
//! Build it to a component with `cargo xtask build-policy PATH` (or the
//! `idem-guest-build` crate); test it natively with a cases file through
//! [`testing::assert_cases`] and as the built `.wasm` with `idem test`.
//!
//! The policy is pure: it imports nothing (no clock, randomness or I/O) but the
//! contract's `diagnostics`, and must return the same answer for the same
//! input. A panic is a trap: the evaluation fails, and the host shows the
//! panic's message and `file:line:column` (the export glue tells it through
//! `diagnostics` before the trap). Return a [`PolicyError`] to refuse an
//! operation: a panic is a bug, not a refusal.

#![warn(missing_docs)]

#[cfg(all(target_arch = "wasm32", feature = "arena"))]
mod arena;
mod decimal;
mod helpers;
#[cfg(all(target_arch = "wasm32", feature = "panic-message"))]
mod panic;
#[cfg(not(target_arch = "wasm32"))]
pub mod testing;

/// On wasm the SDK installs a bump allocator (feature `arena`, on by
/// default): every evaluation runs in a fresh instance, so freeing memory is
/// wasted work. Turn the feature off to bring your own allocator.
#[cfg(all(target_arch = "wasm32", feature = "arena"))]
#[global_allocator]
static ALLOCATOR: arena::BumpArena = arena::BumpArena;

#[doc(hidden)]
#[allow(missing_docs)]
pub mod bindings {
    wit_bindgen::generate!({
        path: "wit",
        world: "idem:policy/idempotency-policy",
        pub_export_macro: true,
        export_macro_name: "__export_idem_world",
        default_bindings_module: "idem_policy::bindings",
        additional_derives: [PartialEq, Eq],
    });
}

/// What a policy derives (the contract's `derivation` record).
pub use bindings::exports::idem::policy::policy::Derivation;
pub use bindings::exports::idem::policy::policy::{
    Decision, DuplicateContext, ErrorCode, Field, Operation, OutcomeSummary, Part, PolicyError,
    PolicyInfo, RecordState, Rejection, RunContext, Trigger, Value,
};
pub use decimal::{DecimalError, MAX_DECIMAL_LEN, canonical_decimal};
pub use helpers::{DAY, HOUR, MINUTE};

/// An idempotency policy. Implement it on a unit struct and hand the struct to
/// [`export_policy!`].
pub trait Policy {
    /// Name, semantic version, key namespace and a one-line description.
    fn describe() -> PolicyInfo;
    /// Key material for an operation, or a typed refusal.
    fn derive(op: &Operation) -> Result<Derivation, PolicyError>;
    /// What a duplicate gets. The host refuses an unsafe decision (for
    /// example re-executing a completed record) and rejects the duplicate.
    fn on_duplicate(ctx: &DuplicateContext) -> Decision;
}

/// Called by [`export_policy!`]'s glue before each call: on wasm, a panic's
/// message and place then reach the host before the trap (feature
/// `panic-message`, on by default; natively the cases runner catches a
/// panic itself, so nothing is installed).
#[doc(hidden)]
pub fn __report_panics() {
    #[cfg(all(target_arch = "wasm32", feature = "panic-message"))]
    panic::report_panics();
}

/// Exports a [`Policy`] implementation as the component's `idem:policy/policy`
/// interface. Use it once per policy crate.
///
/// The glue also makes a panic in the policy reach the host with its message
/// and `file:line:column` ("uncaught in the policy: panic: … at src/lib.rs:…")
/// instead of a bare trap.
#[macro_export]
macro_rules! export_policy {
    ($policy:ty) => {
        #[doc(hidden)]
        pub struct __IdemPolicyExport;

        impl $crate::bindings::exports::idem::policy::policy::Guest for __IdemPolicyExport {
            fn describe() -> $crate::PolicyInfo {
                $crate::__report_panics();
                <$policy as $crate::Policy>::describe()
            }
            fn derive(op: $crate::Operation) -> ::core::result::Result<$crate::Derivation, $crate::PolicyError> {
                $crate::__report_panics();
                <$policy as $crate::Policy>::derive(&op)
            }
            fn on_duplicate(ctx: $crate::DuplicateContext) -> $crate::Decision {
                $crate::__report_panics();
                <$policy as $crate::Policy>::on_duplicate(&ctx)
            }
        }

        $crate::bindings::__export_idem_world!(__IdemPolicyExport with_types_in $crate::bindings);
    };
}
