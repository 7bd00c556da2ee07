//! Ending or extending a claim known only by its key and fence.
//!
//! An [`Execution`](super::Execution) lives in the process that began it.
//! A holder on the other side of a process boundary — a service in another
//! language talking to `idem serve`, which answers each call on its own
//! and keeps no claim in memory that a restart would lose — carries back
//! only the key and the fence it was handed. These calls make the same
//! fence-conditional store writes an `Execution` makes (and log themselves
//! the same way: the store records the change, or the refused write of a
//! deposed fence, in the same transaction).

use std::time::Duration;

use idem_store::{Ending, Outcome, RecordKey};

use super::{Engine, EngineError, execution::end_fenced};

impl Engine {
    /// Records how the attempt holding `fence` on `key` ended, as
    /// [`Execution::finish`](super::Execution::finish) would: refused with
    /// [`EngineError::Fenced`] (changing nothing) when `fence` is not the
    /// record's current fence, the record is no longer in progress, or there
    /// is no such record.
    pub async fn finish_fenced(
        &self,
        key: &RecordKey,
        fence: u64,
        ending: Ending,
        outcome: Outcome,
    ) -> Result<(), EngineError> {
        end_fenced(self.store(), key, fence, ending, outcome).await
    }

    /// Extends the lease of the attempt holding `fence` on `key` to the
    /// store's now + `lease`, as
    /// [`Execution::heartbeat`](super::Execution::heartbeat) would; returns
    /// the new end of the lease (store clock, ms since the epoch). A deposed
    /// holder gets [`EngineError::Fenced`].
    pub async fn heartbeat_fenced(
        &self,
        key: &RecordKey,
        fence: u64,
        lease: Duration,
    ) -> Result<u64, EngineError> {
        Ok(self.store().records().heartbeat(key, fence, lease).await?)
    }
}
