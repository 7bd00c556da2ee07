//! The port beneath [`Store`](crate::Store): what a backend (memory, SQLite,
//! PostgreSQL) supplies so that every store operation is written once, in
//! `operations.rs`.
//!
//! A backend supplies a *record transaction*: lock one record (its own
//! mutex, `BEGIN IMMEDIATE`, `SELECT … FOR UPDATE`), read the store clock
//! after the lock is held, refuse a stale ownership epoch, hand the record
//! and the clock to a decision (a `machine.rs` transition, chosen by the
//! operation), and save what it decided, conditional on what was read. It
//! also supplies its reads, its memberships and job leases, and, where it
//! has them, fast paths: a fresh claim or a holder's finish in one
//! statement, many claims or finishes in one round trip. A fast path says
//! what it wrote; the operations layer checks that against the machine in
//! debug builds, and the model-based test checks every path against an
//! independent model.

use std::time::Duration;

use async_trait::async_trait;

use crate::registry::{Change, Registration};

use crate::attempt::{AttemptEntry, AttemptFilter};
use crate::error::StoreError;
use crate::record::{
    ClaimRequest, Finish, JobLeaseAcquire, ListFilter, Membership, Outcome, OwnershipToken, Record,
    RecordKey, RecordState, StoreOptions,
};

/// What a decision does once it has seen the record: write a record or
/// not, append an attempt-log entry or not, and answer (a refusal may
/// still append an entry: a fenced write is refused *and* logged).
pub struct Step<T> {
    /// The record to write in place of the one that was read, if any.
    pub record: Option<Box<Record>>,
    /// The attempt-log entry to append in the same transaction.
    pub entry: Option<AttemptEntry>,
    /// The answer, once committed. A refusal never writes a record.
    pub answer: Result<T, StoreError>,
}

impl<T> Step<T> {
    /// Nothing to write: end the transaction and answer `answer`.
    pub fn done(answer: T) -> Self {
        Step {
            record: None,
            entry: None,
            answer: Ok(answer),
        }
    }

    /// Write `record` and answer `answer` once it is committed.
    pub fn put(record: Record, answer: T) -> Self {
        Step {
            record: Some(Box::new(record)),
            entry: None,
            answer: Ok(answer),
        }
    }

    /// Refuse, but keep the entry appended with [`Step::logging`].
    pub fn refuse(refusal: StoreError) -> Self {
        Step {
            record: None,
            entry: None,
            answer: Err(refusal),
        }
    }

    /// Appends `entry` to the attempt log in the same transaction.
    pub fn logging(mut self, entry: AttemptEntry) -> Self {
        self.entry = Some(entry);
        self
    }

    /// The same step with its answer mapped by `f`.
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Step<U> {
        Step {
            record: self.record,
            entry: self.entry,
            answer: self.answer.map(f),
        }
    }
}

/// Where a decision gets a new fence from: a backend draws one from its
/// store-wide sequence inside the transaction, only when the decision asks
/// (a replay or a refusal draws none).
pub trait Fences {
    /// The next fence of the store-wide sequence.
    fn next_fence(&mut self) -> Result<u64, StoreError>;
}

/// A decision: given the record under the key (`None` when there is no
/// row; a row past its retention is passed as it is, the machine treats it
/// as absent), the store clock and a fence source, what to write. An `Err`
/// is a refusal that writes nothing at all (not even a log entry). A backend may call it more
/// than once (a retried transaction), so it must not have side effects.
pub type Decide<T> =
    Box<dyn FnMut(Option<Record>, u64, &mut dyn Fences) -> Result<Step<T>, StoreError> + Send>;

/// One record transaction: which record, why, and what it needs.
#[derive(Debug, Clone)]
pub struct Call {
    /// What the call does, for error messages ("claiming", "heartbeating").
    pub context: &'static str,
    /// The record.
    pub key: RecordKey,
    /// Whether the decision may ask for a fence (a backend that cannot draw
    /// lazily draws one up front only then).
    pub draws_fence: bool,
    /// An ownership token to check against the group's current epoch,
    /// inside the transaction, before deciding.
    pub ownership: Option<OwnershipToken>,
}

/// What a fast path wrote, for the operations layer to check against the
/// machine (debug builds).
#[derive(Debug, Clone)]
pub struct Written {
    /// The fence of the written record.
    pub fence: u64,
    /// The store clock the statement wrote with.
    pub now_ms: u64,
    /// The whole row as written, when the backend returned it (debug
    /// builds only: it costs the row's bytes on the wire).
    pub row: Option<Record>,
}

/// The port. `Store` is implemented once for every `RecordBackend`
/// (`operations.rs`); a backend only says how it keeps records.
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

    /// Whether a batch (`claim_many`, `finish_many`) shares what single
    /// calls each pay: a durable commit, a round trip (see
    /// [`crate::Store::batches_share_commits`]). Default: no.
    fn batches_share_commits(&self) -> bool {
        false
    }

    /// See [`crate::Store::concurrent_commits`]. Default: 1.
    fn concurrent_commits(&self) -> usize {
        1
    }

    /// How many expired records one `gc` transaction deletes (with their
    /// log entries): a gc of millions runs as many short transactions, so
    /// that live claims wait for one batch at most, never for the whole
    /// gc. Default: 250 (PostgreSQL: a claim of another key never waits
    /// for gc's row locks anyway).
    fn gc_batch(&self) -> u32 {
        250
    }

    /// Whether several calls are cheaper as one shared transaction
    /// ([`RecordBackend::transact_many`]) than as single calls with their
    /// fast paths. SQLite: yes (one commit, one fsync). PostgreSQL: no (its
    /// batch statements take their place; what they leave goes one call at
    /// a time). Default: yes.
    fn batches_share_a_transaction(&self) -> bool {
        true
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

    /// Many fresh claims in one round trip, for [`crate::Store::claim_many`]:
    /// `requests` are valid, distinct keys under one ownership token (or
    /// none), at least two. One answer per request, in order: what the
    /// backend settled (a claim it made, with what it wrote, or the record
    /// it found; a claim it made is logged `executed` in the same statement),
    /// or `None` to send that request through the single path
    /// afterwards. Default: `None` (no batch path: the operations layer
    /// shares one transaction among them instead).
    async fn batch_claim(
        &self,
        _requests: &[&ClaimRequest],
    ) -> Result<Option<Vec<BatchClaim>>, StoreError> {
        Ok(None)
    }

    /// Many holders' finishes in one round trip, for
    /// [`crate::Store::finish_many`]: `finishes` are distinct keys with
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

    /// Appends entries that describe no record change (answers to
    /// duplicates), with their own `at_ms`, in one transaction.
    async fn append(&self, entries: Vec<AttemptEntry>) -> Result<(), StoreError>;

    /// The attempt-log entries `filter` selects, oldest (lowest id) first.
    async fn read_attempts(&self, filter: &AttemptFilter) -> Result<Vec<AttemptEntry>, StoreError>;

    /// Registers `members` (normalised: sorted, unique, checked) for
    /// `group` (checked), moving the epoch only when they change.
    async fn join(&self, group: &str, members: Vec<String>) -> Result<Membership, StoreError>;

    /// The membership of `group`.
    async fn read_membership(&self, group: &str) -> Result<Option<Membership>, StoreError>;

    /// Takes the job lease (names checked) unless a live one is held.
    async fn acquire_job(
        &self,
        job: &str,
        holder: &str,
        lease: Duration,
    ) -> Result<JobLeaseAcquire, StoreError>;

    /// Extends the job lease held under `fence`.
    async fn heartbeat_job(
        &self,
        job: &str,
        fence: u64,
        lease: Duration,
    ) -> Result<u64, StoreError>;

    /// Releases the job lease held under `fence`.
    async fn release_job(&self, job: &str, fence: u64) -> Result<(), StoreError>;

    /// The registration of `namespace` (every one when `None`), by
    /// namespace.
    async fn read_registrations(
        &self,
        namespace: Option<&str>,
    ) -> Result<Vec<Registration>, StoreError>;

    /// Changes the registration of `namespace` atomically: `change` sees the
    /// current one (or none) and the store clock, and returns the next; a
    /// refusal writes nothing. `component`, when given (digest, bytes), is
    /// kept in the same transaction (kept once per digest).
    async fn update_registration(
        &self,
        namespace: &str,
        component: Option<(String, Vec<u8>)>,
        change: Change,
    ) -> Result<Registration, StoreError>;

    /// The component bytes kept under `digest`.
    async fn read_component(&self, digest: &str) -> Result<Option<Vec<u8>>, StoreError>;

    /// A store-wide setting's value.
    async fn read_setting(&self, name: &str) -> Result<Option<String>, StoreError>;

    /// Sets a store-wide setting.
    async fn write_setting(&self, name: &str, value: &str) -> Result<(), StoreError>;
}

/// One request's answer from [`RecordBackend::batch_claim`].
#[derive(Debug)]
pub enum BatchClaim {
    /// The statement inserted the record: what it wrote.
    Inserted(Written),
    /// A record existed: the machine decides on it, at this clock. (A
    /// record past its retention goes to the single path, which replaces
    /// it under a lock.)
    Found(Record, u64),
    /// Refused (a stale epoch): this request's answer.
    Refused(StoreError),
    /// Neither: the single path decides.
    Single,
}
