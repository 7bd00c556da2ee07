//! The store's ports, one per capability: what the engine, the job runner
//! and the faces ask of a store, each small enough to read on one screen.
//!
//! - [`Writes`]: the writes every operation makes, its claim and its end,
//!   one at a time or many per call. The capability a group commit shares.
//! - [`Records`]: the rest of a record's life (take-over, heartbeat,
//!   mark-unknown, a person's resolution), reading records, gc and the
//!   attempt log.
//! - [`Ownership`]: partitioned ownership (memberships and their epochs)
//!   and job leases.
//! - [`PolicyRegistry`]: which policy each namespace runs.
//! - [`Transactions`]: the store's own database, for an effect whose
//!   writes commit with its end (none in memory: refused).
//! - [`Gates`]: the gate a downstream keeps in front of its writes (a
//!   `(key, fence)` admitted once, a repeat replayed, a lower fence
//!   refused).
//!
//! A [`crate::Store`] holds one implementation of each. A backend
//! implements all of them (through the backend ports, `crate::backend`); a
//! wrapper implements only what it changes ([`crate::GroupCommit`]:
//! [`Writes`]) and takes the store's place for that capability alone.

mod gates;
mod ownership;
mod policy_registry;
mod records;
mod transactions;
mod writes;

pub use gates::Gates;
pub use ownership::Ownership;
pub use policy_registry::PolicyRegistry;
pub use records::Records;
pub use transactions::{Database, Transactions};
pub(crate) use writes::write_by_kind;
pub use writes::{Batching, Writes};
