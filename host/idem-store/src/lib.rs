//! idem's record stores.
//!
//! A store keeps one record per `(namespace, key)` and decides, atomically and
//! by its own clock, who may execute an effect:
//!
//! - [`Store::claim`] inserts an in-progress record under a new fencing token
//!   ("fence"), or reports the existing record ([`Existing`]) so that the
//!   engine can ask the policy what a duplicate gets;
//! - [`Store::take_over`] re-executes after a retryable failure, an unknown
//!   outcome or an expired lease, under a new, higher fence;
//! - [`Store::complete`], [`Store::fail`] and [`Store::heartbeat`] are
//!   conditional on the holder's fence still being current: a deposed holder
//!   gets [`StoreError::Fenced`] and changes nothing.
//!
//! Rules every store follows (the `conformance` module, behind the feature
//! of that name, checks them; a PostgreSQL store must pass it too):
//!
//! - **One transaction per call.** Every method reads the store clock, reads
//!   the record and writes it inside one transaction; no caller ever passes a
//!   "now".
//! - **Leases expire by the store's clock** ([`StoreClock`]), never the
//!   caller's.
//! - **Fences are a store-wide monotonic sequence**: every claim and every
//!   take-over gets a fence strictly greater than any fence the store ever
//!   issued, across garbage collection and reopening.
//! - **A record past its retention counts as absent**, exactly as if
//!   [`Store::gc`] had already removed it: [`Store::get`] does not return it,
//!   [`Store::claim`] replaces it (under a new fence), and writes to it report
//!   [`StoreError::Gone`]. An in-progress record whose lease is live is never
//!   past its retention.
//! - **A holder whose lease expired may still write while nobody has taken
//!   over.** Its fence is still the current one, and the fence (not the lease)
//!   is what decides who may write: the lease only decides when others may
//!   *take over*. Once they do, the old fence is deposed.
//! - **A final record is never overwritten**: completing or failing twice,
//!   even under the same fence, is [`StoreError::NotInProgress`].
//! - **Ownership epochs** (partitioned ownership): each group (e.g. a job)
//!   has a registered membership and an epoch, a store-wide monotonic
//!   sequence that moves, in the same transaction, exactly when the
//!   membership changes ([`Store::join_membership`]). A claim or take-over
//!   carrying an [`OwnershipToken`] that is not the group's current epoch is
//!   [`StoreError::StaleEpoch`] and changes nothing. The epoch gates the
//!   *start* of an effect; the fence still gates every write after it.
//! - **Job leases** ([`Store::acquire_job_lease`]): one live holder per job
//!   name, by the store clock, fenced from the same fence sequence; an
//!   efficiency measure, never what correctness rests on.
//!
//! This crate knows nothing of WebAssembly or policies.
//!
//! Stores are async ([`Store`] is an `async_trait`, usable as
//! `Arc<dyn Store>` since the store is chosen by URL at run time) and must
//! be called inside a tokio runtime: the SQLite store runs its blocking
//! calls on tokio's blocking pool, the PostgreSQL store (module `postgres`)
//! is async throughout.

#![warn(missing_docs)]

mod clock;
mod error;
mod machine;
mod memory;
mod postgres;
mod sqlite;
mod url;

#[cfg(feature = "conformance")]
pub mod conformance;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
pub use idem_core::{Digest, RecordState};
use idem_core::{DuplicateContext, Operation, OutcomeSummary};

pub use clock::{ManualClock, StoreClock};
pub use error::{ConnectErrorKind, OpenErrorKind, StoreError};
pub use memory::MemoryStore;
pub use postgres::{
    DEFAULT_POOL_SIZE, DEFAULT_SCHEMA, POSTGRES_SCHEMA_VERSION, PostgresStore, PostgresUrl, TlsMode,
};
pub use sqlite::{SCHEMA_VERSION, SqliteOptions, SqliteStore, Synchronous};
pub use url::{StoreUrl, redacted_url};

/// Default cap on an outcome's body: 64 KiB.
pub const DEFAULT_MAX_OUTCOME_BYTES: usize = 64 * 1024;

/// Longest stored error text; longer text is cut (on a character boundary)
/// and marked with [`TRUNCATION_MARK`]. Error text is diagnostic, so cutting
/// it is safer than refusing the write that reports a failure.
pub const MAX_ERROR_BYTES: usize = 4096;

/// Appended to error text that was cut to [`MAX_ERROR_BYTES`].
pub const TRUNCATION_MARK: &str = " …[truncated]";

/// What identifies a record: keys of different namespaces never collide.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RecordKey {
    /// The policy's namespace.
    pub namespace: String,
    /// The SHA-256 key the engine derived.
    pub key: Digest,
}

impl RecordKey {
    /// A key in a namespace.
    pub fn new(namespace: impl Into<String>, key: Digest) -> Self {
        RecordKey {
            namespace: namespace.into(),
            key,
        }
    }
}

impl fmt::Display for RecordKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.key)
    }
}

/// Who holds (or last held) a record: provenance for `idem inspect`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Holder {
    /// The run carrying the operation, when there is one.
    pub run_id: Option<String>,
    /// Why the run happened (`scheduled`, `retry`, `manual`, `client`).
    pub trigger: Option<String>,
    /// The run's own attempt number (not the record's attempts).
    pub attempt: Option<u32>,
    /// Host name of the holding process.
    pub host: String,
    /// Process id of the holding process.
    pub pid: u32,
}

impl Holder {
    /// This process: its host name and pid, no run context.
    pub fn this_process() -> Self {
        Holder {
            run_id: None,
            trigger: None,
            attempt: None,
            host: host_name(),
            pid: std::process::id(),
        }
    }
}

/// Best-effort host name without a dependency: `HOSTNAME`, then the kernel's.
/// Read once: every claim records it, and it does not change under us.
fn host_name() -> String {
    static NAME: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    NAME.get_or_init(|| {
        if let Ok(name) = std::env::var("HOSTNAME")
            && !name.is_empty()
        {
            return name;
        }
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|s| s.trim().to_string())
            .ok()
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "unknown".to_string())
    })
    .clone()
}

/// The stored result of an attempt.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Outcome {
    /// The caller's status: an exit code or an HTTP status.
    pub status: i32,
    /// The outcome's bytes, at most the store's `max_outcome_bytes`
    /// (a larger body is refused with [`StoreError::OutcomeTooLarge`]).
    pub body: Vec<u8>,
    /// The error message of a failed attempt; cut to [`MAX_ERROR_BYTES`].
    pub error: Option<String>,
}

impl Outcome {
    /// A successful outcome.
    pub fn new(status: i32, body: impl Into<Vec<u8>>) -> Self {
        Outcome {
            status,
            body: body.into(),
            error: None,
        }
    }

    /// A failure with a message and no body.
    pub fn error(status: i32, message: impl Into<String>) -> Self {
        Outcome {
            status,
            body: Vec::new(),
            error: Some(message.into()),
        }
    }

    /// What a policy sees of the outcome (never its bytes).
    pub fn summary(&self) -> OutcomeSummary {
        OutcomeSummary {
            status: self.status,
            size: self.body.len() as u64,
            error: self.error.clone(),
        }
    }
}

/// A stored record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Namespace and key.
    pub key: RecordKey,
    /// The digest of the policy that derived the key: `sha256:<64 hex>`.
    pub policy_digest: String,
    /// What must match for a duplicate to be a true replay.
    pub fingerprint: Digest,
    /// Who owns the effect (partitioned ownership).
    pub partition: String,
    /// Where the record is in its life.
    pub state: RecordState,
    /// The current fencing token: only its holder may write.
    pub fence: u64,
    /// When the current lease ends, in ms since the epoch, by the store clock.
    pub lease_until_ms: u64,
    /// Attempts made under this key (1 after the first claim).
    pub attempts: u32,
    /// When the record was created, store clock.
    pub created_ms: u64,
    /// When the record last changed, store clock.
    pub updated_ms: u64,
    /// How long the record is kept after it was last written, in ms.
    pub retention_ms: u64,
    /// When the record may be collected, store clock.
    pub retain_until_ms: u64,
    /// The outcome of a completed or failed attempt.
    pub outcome: Option<Outcome>,
    /// Who holds (or last held) the record.
    pub holder: Holder,
}

impl Record {
    /// Lease left at `now_ms`: 0 when expired or when not in progress.
    pub fn lease_remaining_ms(&self, now_ms: u64) -> u64 {
        if self.state == RecordState::InProgress {
            self.lease_until_ms.saturating_sub(now_ms)
        } else {
            0
        }
    }
}

/// How a holder ends its attempt: [`Store::complete`] or [`Store::fail`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// Completed: the record becomes final.
    Completed,
    /// Failed: retryable (a take-over may follow) or permanent (final).
    Failed {
        /// Whether a take-over may follow.
        retryable: bool,
    },
}

impl Ending {
    /// The state the record takes.
    pub fn state(self) -> RecordState {
        match self {
            Ending::Completed => RecordState::Completed,
            Ending::Failed { retryable } => machine::failed_state(retryable),
        }
    }
}

/// One holder's end of its attempt, for [`Store::finish_many`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finish {
    /// The record.
    pub key: RecordKey,
    /// The fence the holder claimed under.
    pub fence: u64,
    /// Completed or failed.
    pub ending: Ending,
    /// What is stored.
    pub outcome: Outcome,
}

/// What the engine asks a store to claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimRequest {
    /// Namespace and key.
    pub key: RecordKey,
    /// `sha256:<64 lowercase hex>`: the policy that derived the key.
    pub policy_digest: String,
    /// The operation's fingerprint.
    pub fingerprint: Digest,
    /// Who owns the effect.
    pub partition: String,
    /// How long the claim holds before its lease expires (store clock).
    pub lease: Duration,
    /// How long the record is kept after its last write (store clock).
    pub retention: Duration,
    /// Who is claiming.
    pub holder: Holder,
    /// The claimer's ownership epoch, when it works under partitioned
    /// ownership: the store refuses the claim
    /// ([`StoreError::StaleEpoch`]) unless it is the group's current epoch.
    /// `None` (the default) checks nothing.
    pub ownership: Option<OwnershipToken>,
}

/// Proof of ownership under a membership: the group and the epoch that
/// [`Store::join_membership`] returned.
///
/// A worker computes what it owns from a membership, then carries the
/// membership's epoch on every claim and take-over. Once the membership
/// changes, the epoch moves on and the store refuses the old one: a worker
/// that was deposed while paused cannot start an effect when it wakes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OwnershipToken {
    /// The group (e.g. the job name).
    pub group: String,
    /// The epoch the worker's view of the membership has.
    pub epoch: u64,
}

/// A group's registered membership.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Membership {
    /// The group.
    pub group: String,
    /// The group's current epoch: a value of a store-wide sequence, so it
    /// only ever increases, and it changes exactly when the members do.
    pub epoch: u64,
    /// The members, sorted and without repeats.
    pub members: Vec<String>,
}

impl Membership {
    /// The token that proves a claim is made under this membership.
    pub fn token(&self) -> OwnershipToken {
        OwnershipToken {
            group: self.group.clone(),
            epoch: self.epoch,
        }
    }
}

/// A job-level lease: who runs a whole job right now.
///
/// An efficiency measure only (two whole runs need not both do the work);
/// correctness never depends on it: every operation is still claimed and
/// fenced on its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobLease {
    /// The job's name.
    pub job: String,
    /// Who holds it (free text, e.g. host, pid and run id).
    pub holder: String,
    /// The lease's fence, from the store-wide fence sequence; hand it back
    /// to heartbeat or release.
    pub fence: u64,
    /// When the lease ends, store clock (ms since the epoch).
    pub lease_until_ms: u64,
}

/// What [`Store::acquire_job_lease`] got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobLeaseAcquire {
    /// The caller holds the job lease.
    Acquired(JobLease),
    /// Another holder's lease is live.
    Held {
        /// The live lease.
        current: JobLease,
        /// How long it has left, store clock.
        remaining_ms: u64,
    },
}

/// A claim: the right to execute the effect, as long as `fence` is current.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    /// Namespace and key.
    pub key: RecordKey,
    /// The fencing token; hand it back on every write.
    pub fence: u64,
    /// When the lease ends, store clock.
    pub lease_until_ms: u64,
    /// Which attempt this is under the key (1 for the first).
    pub attempt: u32,
}

/// A record as the store saw it, with store-clock times.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordView {
    /// The record.
    pub record: Record,
    /// The store clock when the record was read.
    pub now_ms: u64,
    /// Age of the record (since creation), store clock.
    pub age_ms: u64,
    /// Lease left on an in-progress record; 0 when expired or not in
    /// progress.
    pub lease_remaining_ms: u64,
}

impl RecordView {
    pub(crate) fn at(record: Record, now_ms: u64) -> Self {
        RecordView {
            age_ms: now_ms.saturating_sub(record.created_ms),
            lease_remaining_ms: record.lease_remaining_ms(now_ms),
            now_ms,
            record,
        }
    }
}

/// The record a claim collided with: what the engine needs to ask the
/// policy what the duplicate gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Existing {
    /// The record and its store-clock times.
    pub view: RecordView,
    /// Whether the claim's fingerprint equals the stored one.
    pub fingerprint_matches: bool,
}

impl Existing {
    /// The duplicate context a policy's `on-duplicate` receives.
    pub fn duplicate_context(&self, operation: Operation) -> DuplicateContext {
        let record = &self.view.record;
        DuplicateContext {
            operation,
            state: record.state,
            fingerprint_matches: self.fingerprint_matches,
            attempts: record.attempts,
            age_ms: self.view.age_ms,
            lease_remaining_ms: self.view.lease_remaining_ms,
            outcome: record.outcome.as_ref().map(Outcome::summary),
        }
    }
}

/// What a claim got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimOutcome {
    /// No live record existed: the caller holds the key and executes.
    Claimed(Claim),
    /// A live record exists: ask the policy what the duplicate gets.
    Existing(Box<Existing>),
}

/// Which records [`Store::list`] returns, most recently updated first.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ListFilter {
    /// Only this namespace.
    pub namespace: Option<String>,
    /// Only this partition.
    pub partition: Option<String>,
    /// Only records in this state.
    pub state: Option<RecordState>,
    /// At most this many records (all when `None`).
    pub limit: Option<u32>,
}

/// Options every store takes.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// The store clock: the system clock unless a test injects one.
    pub clock: StoreClock,
    /// Largest outcome body accepted (default 64 KiB).
    pub max_outcome_bytes: usize,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            clock: StoreClock::system(),
            max_outcome_bytes: DEFAULT_MAX_OUTCOME_BYTES,
        }
    }
}

/// A record store.
///
/// Every method is one atomic transaction that reads the store's own clock.
/// Conflicts are typed errors: [`StoreError::Fenced`],
/// [`StoreError::NotInProgress`], [`StoreError::NotEligible`],
/// [`StoreError::Gone`] (see [`StoreError::is_conflict`]); a conflicting call
/// changes nothing.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// Where the store is, for messages (e.g. `sqlite:/var/lib/idem.db`).
    fn describe(&self) -> String;

    /// The clock this store decides leases by, as this process reads it (a
    /// database server's own clock stays the authority for leases; see
    /// [`StoreClock`]). The engine hands its reading to policies as their
    /// logical time, so that a simulation on a [`ManualClock`] is
    /// deterministic down to what the policy sees.
    fn clock(&self) -> &StoreClock;

    /// Claims `request.key`: inserts an in-progress record under a new fence
    /// when no live record exists (a record past its retention counts as
    /// absent and is replaced), else reports the existing record.
    async fn claim(&self, request: ClaimRequest) -> Result<ClaimOutcome, StoreError>;

    /// [`Store::claim`] for many requests in one call: what each would have
    /// got, in order, as if claimed one after the other (a key repeated in
    /// the batch finds the record its first occurrence made). The fences of
    /// the claims a batch makes are new and higher than any before it, in
    /// an order of the store's choosing (PostgreSQL inserts in key order,
    /// so that racing batches never deadlock). Each claim is
    /// atomic on its own; the batch is not a transaction, only fewer round
    /// trips (PostgreSQL: one statement for the fresh keys, one for the
    /// rest) and fewer commits (SQLite: one transaction, one fsync). The
    /// outer error is a failure of the whole call (nothing, or only some
    /// claims, may have been made: each made claim is live and fenced like
    /// any other); the inner ones are per request, as `claim` returns them.
    /// The default claims one at a time.
    async fn claim_many(
        &self,
        requests: Vec<ClaimRequest>,
    ) -> Result<Vec<Result<ClaimOutcome, StoreError>>, StoreError> {
        let mut outcomes = Vec::with_capacity(requests.len());
        for request in requests {
            outcomes.push(self.claim(request).await);
        }
        Ok(outcomes)
    }

    /// Re-executes under a new, higher fence (attempts + 1), after the policy
    /// decided `re-execute`. Succeeds only while the record still carries
    /// `observed_fence` and is failed-retryable, outcome-unknown, or
    /// in-progress with its lease expired by the store clock.
    async fn take_over(
        &self,
        key: &RecordKey,
        observed_fence: u64,
        lease: Duration,
        holder: Holder,
    ) -> Result<Claim, StoreError> {
        self.take_over_with(key, observed_fence, lease, holder, None)
            .await
    }

    /// [`Store::take_over`] under partitioned ownership: refused with
    /// [`StoreError::StaleEpoch`] (changing nothing) unless `ownership` is
    /// the group's current epoch. `None` checks nothing.
    async fn take_over_with(
        &self,
        key: &RecordKey,
        observed_fence: u64,
        lease: Duration,
        holder: Holder,
        ownership: Option<&OwnershipToken>,
    ) -> Result<Claim, StoreError>;

    /// Marks an in-progress record whose lease expired as outcome-unknown,
    /// if it still carries `observed_fence`. Idempotent: a record already
    /// outcome-unknown under `observed_fence` is left as it is.
    async fn mark_unknown(&self, key: &RecordKey, observed_fence: u64) -> Result<(), StoreError>;

    /// Completes the attempt holding `fence`; the record is then final.
    async fn complete(
        &self,
        key: &RecordKey,
        fence: u64,
        outcome: Outcome,
    ) -> Result<(), StoreError>;

    /// Records the failure of the attempt holding `fence`: failed-retryable
    /// (a take-over may follow) or failed-permanent (final).
    async fn fail(
        &self,
        key: &RecordKey,
        fence: u64,
        retryable: bool,
        outcome: Outcome,
    ) -> Result<(), StoreError>;

    /// [`Store::complete`] and [`Store::fail`] for many holders in one call:
    /// what each would have got, in order. Each write is conditional on its
    /// own key and fence, exactly as alone; the batch is not a transaction,
    /// only fewer round trips (PostgreSQL: one statement) and fewer commits
    /// (SQLite: one transaction, one fsync). The outer error is a failure of
    /// the whole call (some writes may have been made); the inner ones are
    /// per holder, as `complete` and `fail` return them. The default
    /// finishes one at a time.
    async fn finish_many(
        &self,
        finishes: Vec<Finish>,
    ) -> Result<Vec<Result<(), StoreError>>, StoreError> {
        let mut results = Vec::with_capacity(finishes.len());
        for f in finishes {
            results.push(match f.ending {
                Ending::Completed => self.complete(&f.key, f.fence, f.outcome).await,
                Ending::Failed { retryable } => {
                    self.fail(&f.key, f.fence, retryable, f.outcome).await
                }
            });
        }
        Ok(results)
    }

    /// Extends the lease of the attempt holding `fence` to store-now +
    /// `lease`; returns the new `lease_until_ms`.
    async fn heartbeat(
        &self,
        key: &RecordKey,
        fence: u64,
        lease: Duration,
    ) -> Result<u64, StoreError>;

    /// The live record under `key`, if any.
    async fn get(&self, key: &RecordKey) -> Result<Option<RecordView>, StoreError>;

    /// Live records matching `filter`, most recently updated first.
    async fn list(&self, filter: ListFilter) -> Result<Vec<RecordView>, StoreError>;

    /// Removes the records past their retention (never an in-progress record
    /// whose lease is live); returns how many were removed.
    async fn gc(&self) -> Result<u64, StoreError>;

    /// Registers `members` as the membership of `group` and returns the
    /// group's membership. When the members (as a set) differ from the
    /// stored ones, or the group has none yet, the group gets a new epoch
    /// from a store-wide monotonic sequence, in the same transaction;
    /// otherwise the stored epoch is returned unchanged, so that workers
    /// joining with the same view agree on it. Members must be non-empty
    /// names without control characters ([`StoreError::InvalidRequest`]).
    async fn join_membership(
        &self,
        group: &str,
        members: &[String],
    ) -> Result<Membership, StoreError>;

    /// The membership of `group`, if one was registered.
    async fn membership(&self, group: &str) -> Result<Option<Membership>, StoreError>;

    /// Takes the job lease `job` for `lease` (store clock) under a new fence,
    /// unless another holder's lease is live ([`JobLeaseAcquire::Held`]).
    /// A lease that expired, or was released, is taken.
    async fn acquire_job_lease(
        &self,
        job: &str,
        holder: &str,
        lease: Duration,
    ) -> Result<JobLeaseAcquire, StoreError>;

    /// Extends the job lease held under `fence` to store-now + `lease`;
    /// returns the new `lease_until_ms`. [`StoreError::JobLeaseLost`] when
    /// someone else took it (or it was released).
    async fn heartbeat_job_lease(
        &self,
        job: &str,
        fence: u64,
        lease: Duration,
    ) -> Result<u64, StoreError>;

    /// Releases the job lease held under `fence`, so the next run need not
    /// wait for it to expire. [`StoreError::JobLeaseLost`] when it is no
    /// longer held under `fence`.
    async fn release_job_lease(&self, job: &str, fence: u64) -> Result<(), StoreError>;
}

/// Opens the store a URL names: `sqlite:PATH`, `sqlite://PATH` (query
/// `?synchronous=full|normal&busy_timeout_ms=N`), `postgres://…` or
/// `postgresql://…` (see [`PostgresUrl`]) or `memory:`. Opening migrates a
/// persistent store's schema.
pub async fn open(url: &str, options: StoreOptions) -> Result<Arc<dyn Store>, StoreError> {
    match url.parse::<StoreUrl>()? {
        StoreUrl::Memory => Ok(Arc::new(MemoryStore::new(options))),
        StoreUrl::Sqlite {
            path,
            options: sqlite,
        } => {
            // Opening runs migrations and may wait on other processes' locks.
            let store =
                tokio::task::spawn_blocking(move || SqliteStore::open(&path, sqlite, options))
                    .await
                    .map_err(|e| StoreError::Task(e.to_string()))??;
            Ok(Arc::new(store))
        }
        StoreUrl::Postgres(url) => Ok(Arc::new(PostgresStore::open(url, options).await?)),
    }
}

/// Brings the schema of the store a URL names to the newest version this
/// build knows (creating the store when absent) and returns that version:
/// the `idem migrate --store URL` entry point. Idempotent, and safe to run
/// from several processes at once. A store of a newer schema is refused
/// ([`StoreError::SchemaTooNew`], [`StoreError::DatabaseSchemaTooNew`]); an
/// in-memory store has no schema (version 0).
pub async fn migrate(url: &str) -> Result<i64, StoreError> {
    match url.parse::<StoreUrl>()? {
        StoreUrl::Memory => Ok(0),
        StoreUrl::Sqlite {
            path,
            options: sqlite,
        } => {
            let store = tokio::task::spawn_blocking(move || {
                SqliteStore::open(&path, sqlite, StoreOptions::default())
            })
            .await
            .map_err(|e| StoreError::Task(e.to_string()))??;
            store.schema_version().await
        }
        StoreUrl::Postgres(url) => {
            PostgresStore::open(url, StoreOptions::default())
                .await?
                .schema_version()
                .await
        }
    }
}
