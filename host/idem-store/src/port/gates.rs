//! [`Gates`]: the gate a downstream keeps in front of its writes.

use std::time::Duration;

use async_trait::async_trait;

use crate::vocabulary::{Admission, GateEntry, GateRequest, GateTicket, StoreError};

/// The gate a downstream keeps (a provider adapter, an internal ledger
/// service): each call one transaction of the store, decided by the
/// store's clock. See the book's page "The gate for a downstream".
///
/// - [`Gates::admit`] admits a `(key, fence)` once: a key whose effect was
///   applied answers [`Admission::Replay`] with the stored result; a fence
///   lower than the highest seen for the key is [`Admission::Stale`];
///   while an admission is in flight (its window, by the store's clock,
///   not run out) every other caller is [`Admission::Busy`], and a higher
///   fence among them is remembered as the highest, so that the lower one
///   is never admitted again.
/// - [`Gates::record`] stores the admitted effect's result (the key is
///   then done), [`Gates::release`] frees the key when the effect applied
///   nothing, [`Gates::extend`] keeps the window open while it runs. Each
///   holds only for the admission still in flight: once the gate gave up
///   on it (its window ran out and another holder was admitted) it is
///   [`StoreError::GateRefused`].
///
/// What it cannot promise: an effect that outlives its window (a process
/// paused, a handler not extending it) may run beside the next admission;
/// a crash between the effect and [`Gates::record`] leaves the key to be
/// admitted again once the window runs out (the next admission names it:
/// `lapsed`). The form that closes both gaps runs the admission, the
/// downstream's writes and the result in one transaction of the
/// downstream's database (`SqliteStore::gate_in_transaction`,
/// `PostgresStore::gate_admit_in`).
///
/// Entries are kept until removed ([`Gates::forget`]): a key forgotten is
/// a new key, whatever fence it comes back with.
#[async_trait]
pub trait Gates: Send + Sync + 'static {
    /// The gate's answer to `request` (see the trait docs).
    async fn admit(&self, request: &GateRequest) -> Result<Admission, StoreError>;

    /// Stores the admitted effect's `result`: later holders of the key get
    /// it replayed.
    async fn record(&self, ticket: &GateTicket, result: Vec<u8>) -> Result<(), StoreError>;

    /// Frees the key: the admitted effect applied nothing.
    async fn release(&self, ticket: &GateTicket) -> Result<(), StoreError>;

    /// Keeps the admission in flight for `window` from now (store clock).
    async fn extend(&self, ticket: &GateTicket, window: Duration) -> Result<(), StoreError>;

    /// The entry the gate keeps for `key`, if any.
    async fn entry(&self, gate: &str, key: &str) -> Result<Option<GateEntry>, StoreError>;

    /// Removes the gate's entries last changed before `before_ms` (store
    /// clock), except those in flight; answers how many went.
    async fn forget(&self, gate: &str, before_ms: u64) -> Result<u64, StoreError>;
}
