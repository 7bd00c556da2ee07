//! # idem: side effects that happen exactly once
//!
//! A payment service embeds this library; teams ship their idempotency policy
//! as a WebAssembly component. The policy derives a deterministic key for each
//! operation and decides what a duplicate gets; the host enforces it.
//!
//! - [`policy`]: the sandboxed policy runtime (knows nothing of storage).
//! - [`store`] (`idem-store`): record stores (know nothing of wasm).
//! - [`engine`]: composes the two: fenced claims, leases, duplicates.
//! - [`job`]: a batch job's operations through an effect, at most once per
//!   key (`idem run` as a library): ownership, the job lease, batched
//!   claims and completions, a summary.
//! - [`consume`]: messages from a broker, each run as an operation exactly
//!   as a job runs one, its delivery settled once its end is recorded (`idem
//!   consume` as a library).
//! - [`broker`]: the brokers a consumer reads (JetStream with the `nats`
//!   feature, RabbitMQ with `amqp`) behind one port; they know nothing of
//!   the engine.
//! - [`forensics`]: why it ran twice: the store's attempt log read back
//!   as duplicates and their causes, and the runs involved.
//! - [`lifecycle`]: a policy across versions: `idem diff` (which keys an
//!   upgrade changes, and why) and the activation gate (a version's own
//!   golden vectors).
//! - [`idem_core`] (re-exported as [`core`]): the contract in plain Rust:
//!   canonical operations, key encoding, the decision safety gate.
//!
//! The `idem` command line is the `idem-cli` package; the seeded simulation
//! behind `idem demo` and the chaos suite is `idem-sim`. Neither is linked
//! into a service that embeds this library.

#![warn(missing_docs)]

pub mod broker;
pub mod consume;
pub mod engine;
pub mod forensics;
pub mod job;
pub mod lifecycle;
pub mod policy;

pub use idem_store as store;

pub use idem_core as core;
