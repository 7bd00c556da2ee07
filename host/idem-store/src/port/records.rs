//! [`Records`]: a record's life after its claim, reading records, and the
//! attempt log.

use std::time::Duration;

use async_trait::async_trait;

use crate::vocabulary::Holder;
use crate::vocabulary::StoreError;
use crate::vocabulary::{AttemptEntry, AttemptFilter, ResolveRequest};
use crate::vocabulary::{Claim, ListFilter, OwnershipToken, RecordKey, RecordView};

/// The records a store keeps, beyond their claim and end ([`crate::Writes`]):
/// re-execution, leases, review, reads, retention and the attempt log.
///
/// Every call is one atomic transaction that reads the store's own clock;
/// a conflict ([`StoreError::Fenced`], [`StoreError::NotInProgress`],
/// [`StoreError::NotEligible`], [`StoreError::Gone`]) changes nothing.
#[async_trait]
pub trait Records: Send + Sync + 'static {
    /// Re-executes under a new, higher fence (attempts + 1), after the policy
    /// decided `re-execute`. Succeeds only while the record still carries
    /// `observed_fence` and is failed-retryable, outcome-unknown, or
    /// in-progress with its lease expired by the store clock. Under
    /// partitioned ownership, refused with [`StoreError::StaleEpoch`]
    /// (changing nothing) unless `ownership` is the group's current epoch;
    /// `None` checks nothing. The new attempt's effect does not commit with
    /// its end (see [`Records::take_over_as`]).
    async fn take_over(
        &self,
        key: &RecordKey,
        observed_fence: u64,
        lease: Duration,
        holder: Holder,
        ownership: Option<&OwnershipToken>,
    ) -> Result<Claim, StoreError> {
        self.take_over_as(key, observed_fence, lease, holder, ownership, false)
            .await
    }

    /// [`Records::take_over`] by an attempt whose effect commits in the
    /// same store transaction as its end when `effect_atomic` (see
    /// [`ClaimRequest::effect_atomic`](crate::ClaimRequest::effect_atomic)):
    /// the record keeps the taker's flag, never the deposed holder's. A
    /// take-over of a claim that expired with its effect atomic with its
    /// end is logged with [`EXPIRED_WITHOUT_EFFECT`](crate::EXPIRED_WITHOUT_EFFECT)
    /// as its detail: that attempt did nothing.
    async fn take_over_as(
        &self,
        key: &RecordKey,
        observed_fence: u64,
        lease: Duration,
        holder: Holder,
        ownership: Option<&OwnershipToken>,
        effect_atomic: bool,
    ) -> Result<Claim, StoreError>;

    /// Marks an in-progress record whose lease expired as outcome-unknown,
    /// if it still carries `observed_fence`. Idempotent: a record already
    /// outcome-unknown under `observed_fence` is left as it is.
    async fn mark_unknown(&self, key: &RecordKey, observed_fence: u64) -> Result<(), StoreError>;

    /// Extends the lease of the attempt holding `fence` to store-now +
    /// `lease`; returns the new `lease_until_ms`.
    async fn heartbeat(
        &self,
        key: &RecordKey,
        fence: u64,
        lease: Duration,
    ) -> Result<u64, StoreError>;

    /// A person settles a record waiting for review: outcome-unknown, or in
    /// progress with its lease expired by the store clock. Under a new,
    /// higher fence (a late write of the deposed holder is then refused as
    /// fenced), conditional on `request.observed_fence` still being the
    /// record's ([`StoreError::Fenced`] otherwise: a resolution racing a late
    /// completion has one winner), and logged with who and why in the same
    /// transaction. A record not waiting for review is
    /// [`StoreError::NotEligible`] and nothing changes. Returns the record
    /// as resolved.
    async fn resolve(&self, request: ResolveRequest) -> Result<RecordView, StoreError>;

    /// A person amends a person's resolution that was wrong: the record's
    /// fence must have been written by a release or a rejection (read from
    /// the attempt log) and still be `request.observed_fence`
    /// ([`StoreError::Fenced`] otherwise: a claim took the released record
    /// since, or someone amended it first). The record is settled again
    /// under a new, higher fence as `request.resolution` says, and the
    /// amendment is logged as a resolution of its own whose detail names
    /// the one it amends (`amends resolved-rejected at fence 7: …`): the
    /// log keeps both decisions. A completed record is never amended, a
    /// person's completion included ([`StoreError::NotEligible`]), nor a
    /// holder's end, nor a record waiting for review (settle it with
    /// [`Records::resolve`]). Later duplicates get what the amended record
    /// says; earlier answers stand, in the log.
    async fn amend(&self, request: ResolveRequest) -> Result<RecordView, StoreError>;

    /// The live record under `key`, if any.
    async fn get(&self, key: &RecordKey) -> Result<Option<RecordView>, StoreError>;

    /// The live record under each of `keys`, in order, read in one store
    /// call (one statement on PostgreSQL, one read on SQLite) with one
    /// store clock. Read-only: a job looks ahead with it (an operation
    /// already completed is settled without a claim); what it finds may
    /// change before a later claim, which decides as always.
    async fn get_many(&self, keys: &[RecordKey]) -> Result<Vec<Option<RecordView>>, StoreError>;

    /// Live records matching `filter`, most recently updated first.
    async fn list(&self, filter: ListFilter) -> Result<Vec<RecordView>, StoreError>;

    /// Removes the records past their retention (never an in-progress record
    /// whose lease is live), and their attempt-log entries; returns how many
    /// records were removed. Then brings a lookup index that a store keeps
    /// behind its writes (SQLite's) up to date.
    async fn gc(&self) -> Result<u64, StoreError>;

    /// Appends answers to duplicates to the attempt log (a replay, in
    /// progress, a conflict, a rejection: answers that change no record),
    /// in one transaction. Each keeps its `at_ms`: when the answer was
    /// given, by the caller's reading of the store's clock (an answer may be
    /// written a little after it was given; its time is when it happened).
    /// An answer about a record that is no longer stored (gc removed it
    /// after the answer was given) is not written: it would outlive the
    /// record's other entries, which gc removed with it. Entries that
    /// describe a record change are written by the change itself; passing
    /// one here is [`StoreError::InvalidRequest`].
    async fn log_answers(&self, entries: Vec<AttemptEntry>) -> Result<(), StoreError>;

    /// The attempt-log entries `filter` selects, oldest first.
    async fn attempts(&self, filter: AttemptFilter) -> Result<Vec<AttemptEntry>, StoreError>;
}
