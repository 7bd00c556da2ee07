//! [`GateBackend`]: what a backend supplies for the gate a downstream
//! keeps (`crate::Gates`, written once in `execute/gates.rs`).

use async_trait::async_trait;

use crate::machine::gate::GateStep;
use crate::vocabulary::{GateEntry, StoreError};

/// A gate decision: the key's entry and the store clock in, what to save
/// and answer out (a `machine::gate` function). `Fn`, not `FnOnce`: a
/// transaction that changed nothing (a serialization failure) is decided
/// again.
pub type GateDecide<T> =
    Box<dyn Fn(Option<GateEntry>, u64) -> Result<GateStep<T>, StoreError> + Send + Sync>;

/// One gate entry's transaction, and the gate's reads.
#[async_trait]
pub trait GateBackend: Send + Sync + 'static {
    /// Locks `(gate, key)`'s entry (absent or not), reads the store clock
    /// under the lock, hands both to `decide`, saves what it returns and
    /// commits: one transaction.
    async fn gate_transact<T: Send + 'static>(
        &self,
        gate: &str,
        key: &str,
        decide: GateDecide<T>,
    ) -> Result<T, StoreError>;

    /// The entry as committed.
    async fn gate_read(&self, gate: &str, key: &str) -> Result<Option<GateEntry>, StoreError>;

    /// Deletes `gate`'s entries last changed before `before_ms`, except
    /// those in flight.
    async fn gate_forget(&self, gate: &str, before_ms: u64) -> Result<u64, StoreError>;
}
