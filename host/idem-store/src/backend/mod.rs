//! The ports beneath the store's capabilities: what a backend (memory,
//! SQLite, PostgreSQL) supplies so that every store call is written once,
//! in `execute/`.
//!
//! A backend supplies a *record transaction* ([`RecordBackend::transact`]):
//! lock one record (its own mutex, `BEGIN IMMEDIATE`, `SELECT … FOR
//! UPDATE`), read the store clock after the lock is held, refuse a stale
//! ownership epoch, hand the record and the clock to a decision (a
//! `machine/` transition, chosen by the executor), and save what it
//! decided, conditional on what was read. It also supplies its reads, its
//! log, and, where it has them, fast paths: a fresh claim or a holder's
//! finish in one statement, many claims or finishes in one round trip. A
//! fast path says what it wrote; the executor checks that against the
//! machine in debug builds, and the model-based test checks every path
//! against an independent model. Memberships and job leases
//! ([`OwnershipBackend`]) and the registry ([`RegistryBackend`]) are ports
//! of their own, and so is the gate a downstream keeps ([`GateBackend`]:
//! one entry's transaction).
//!
//! Public only inside the crate's private `backend` module (so that they
//! cannot be named, or implemented, outside the crate).

mod gates;
mod ownership;
mod policy_registry;
mod records;
mod transaction;

pub use gates::{GateBackend, GateDecide};
pub use ownership::OwnershipBackend;
pub use policy_registry::RegistryBackend;
pub use records::RecordBackend;
pub use transaction::{BatchAnswer, Call, Decide, Fences, Step, Written};
