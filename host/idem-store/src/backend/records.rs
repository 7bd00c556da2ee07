//! The records port beneath [`crate::Writes`] and [`crate::Records`].

use async_trait::async_trait;

use super::{BatchAnswer, Call, Decide, Written};
use crate::port::Batching;
use crate::vocabulary::StoreError;
use crate::vocabulary::{AttemptEntry, AttemptFilter};
use crate::vocabulary::{
    ClaimRequest, Finish, ListFilter, Outcome, Record, RecordKey, RecordState, StoreOptions,
};

/// The records port. [`crate::Writes`] and [`crate::Records`] are
/// implemented once for every `RecordBackend` (`execute/`); a backend only
/// says how it keeps records and their log.
///
/// Public only inside the crate's private `backend` module (so it cannot be
/// named, or implemented, outside the crate).
#[async_trait]
pub trait RecordBackend: Send + Sync + 'static {
    /// Where the store is, for messages (`sqlite:/var/lib/idem.db`).
    fn name(&self) -> &str;

    /// The options the store was opened with (its clock, its body cap).
    fn options(&self) -> &StoreOptions;

    /// Runs one record transaction (see the module docs). A refusal from
    /// the epoch check or from `decide` changes nothing and is returned as
    /// it is; a backend failure is a [`StoreError`] of its own.
    async fn transact<T: Send + 'static>(
        &self,
        call: Call,
        decide: Decide<T>,
    ) -> Result<T, StoreError>;

    /// What a batch costs this backend (see [`Batching`]); the store's
    /// [`crate::Writes::batching`]. [`Batching::one_transaction`] also
    /// chooses how the executor runs a batch the backend has no statement
    /// for: in one [`RecordBackend::transact_many`] (SQLite: one commit), or
    /// one call at a time with its fast paths (PostgreSQL). Default:
    /// [`Batching::NONE`].
    fn batching(&self) -> Batching {
        Batching::NONE
    }

    /// How many expired records one `gc` transaction deletes (with their
    /// log entries): a gc of millions runs as many short transactions, so
    /// that live claims wait for one batch at most, never for the whole
    /// gc. Default: 250 (PostgreSQL: a claim of another key never waits
    /// for gc's row locks anyway).
    fn gc_batch(&self) -> u32 {
        250
    }

    /// Several record transactions in one call, in order. Each is decided
    /// as [`RecordBackend::transact`] decides it, and a refusal is that
    /// call's answer alone; the outer error is a failure of the whole call.
    /// A backend that can share one commit among them (SQLite: one write
    /// transaction, one fsync) overrides this; the default runs them one
    /// at a time.
    async fn transact_many<T: Send + 'static>(
        &self,
        calls: Vec<(Call, Decide<T>)>,
    ) -> Result<Vec<Result<T, StoreError>>, StoreError> {
        let mut answers = Vec::with_capacity(calls.len());
        for (call, decide) in calls {
            answers.push(self.transact(call, decide).await);
        }
        Ok(answers)
    }

    /// A fresh claim in one statement: inserts the record
    /// `machine::new_record` would when no row exists under the key, with
    /// its `executed` attempt-log entry, and says what it wrote; `None` when a row exists (the transaction then
    /// decides). The request is valid. Default: no fast path.
    async fn fast_claim(&self, _request: &ClaimRequest) -> Result<Option<Written>, StoreError> {
        Ok(None)
    }

    /// A holder's finish in one statement, with `machine::finish`'s
    /// conditions and values (the outcome is already checked) and its
    /// attempt-log entry; `None` when
    /// it wrote nothing (the transaction then says why). Default: no fast
    /// path.
    async fn fast_finish(
        &self,
        _key: &RecordKey,
        _fence: u64,
        _state: RecordState,
        _outcome: &Outcome,
    ) -> Result<Option<Written>, StoreError> {
        Ok(None)
    }

    /// Many fresh claims in one round trip, for [`crate::Writes::claim_many`]:
    /// `requests` are valid, distinct keys under one ownership token (or
    /// none), at least two. One answer per request, in order: what the
    /// backend settled (a claim it made, with what it wrote, or the record
    /// it found; a claim it made is logged `executed` in the same statement),
    /// or `None` to send that request through the single path
    /// afterwards. Default: `None` (no batch path: the executor
    /// shares one transaction among them instead).
    async fn batch_claim(
        &self,
        _requests: &[&ClaimRequest],
    ) -> Result<Option<Vec<BatchAnswer>>, StoreError> {
        Ok(None)
    }

    /// Many holders' finishes in one round trip, for
    /// [`crate::Writes::finish_many`]: `finishes` are distinct keys with
    /// checked outcomes. One answer per finish, in order: what it wrote (and
    /// logged), or
    /// `None` for the single path to decide afterwards. Default: `None` (no
    /// batch path).
    async fn batch_finish(
        &self,
        _finishes: &[&Finish],
    ) -> Result<Option<Vec<Option<Written>>>, StoreError> {
        Ok(None)
    }

    /// The record under `key` as it is stored (past its retention or not)
    /// and the store clock of the same read.
    async fn read(&self, key: &RecordKey) -> Result<(Option<Record>, u64), StoreError>;

    /// The records under `keys` as they are stored, in order, and the store
    /// clock of the same read. By default one [`RecordBackend::read`] per
    /// key (each answer at its own clock, the last one returned); backends
    /// override it with one read.
    async fn read_keys(
        &self,
        keys: &[RecordKey],
    ) -> Result<(Vec<Option<Record>>, u64), StoreError> {
        let mut out = Vec::with_capacity(keys.len());
        let mut now = 0;
        for key in keys {
            let (record, at) = self.read(key).await?;
            now = now.max(at);
            out.push(record);
        }
        Ok((out, now))
    }

    /// The records `filter` selects that do not count as absent, most
    /// recently updated first (then by namespace and key), with the store
    /// clock of the same read.
    async fn read_many(&self, filter: &ListFilter) -> Result<(Vec<Record>, u64), StoreError>;

    /// Deletes up to `limit` records past their retention, and their
    /// attempt-log entries, in one transaction; how many records. `gc`
    /// calls it until a call deletes fewer than `limit`, so that a large
    /// backlog goes in short transactions between which live claims get
    /// the store.
    async fn collect_garbage(&self, limit: u32) -> Result<u64, StoreError>;

    /// Where a lookup index kept behind the writes (SQLite's,
    /// `sqlite/field_index.rs`) must reach to cover every record written
    /// so far; `None` when there is no such index (PostgreSQL's is written
    /// with each record, and the memory store scans). `gc` indexes up to
    /// it and no further, so that claims arriving faster than the indexer
    /// cannot keep it going.
    async fn index_end(&self) -> Result<Option<i64>, StoreError> {
        Ok(None)
    }

    /// Brings that index one batch nearer `upto` (an [`Self::index_end`]);
    /// how many records it indexed, 0 once it has reached it. `gc` calls
    /// it until then, each batch its own transaction.
    async fn index_batch(&self, upto: i64) -> Result<u64, StoreError> {
        let _ = upto;
        Ok(0)
    }

    /// Appends entries that describe no record change (answers to
    /// duplicates), with their own `at_ms`, in one transaction.
    async fn append(&self, entries: Vec<AttemptEntry>) -> Result<(), StoreError>;

    /// The attempt-log entries `filter` selects, oldest (lowest id) first.
    async fn read_attempts(&self, filter: &AttemptFilter) -> Result<Vec<AttemptEntry>, StoreError>;
}
