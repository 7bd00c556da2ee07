//! The public vocabulary of stores: keys, records, outcomes, claims and
//! what a call returns. Plain data; no I/O.

use std::fmt;
use std::time::Duration;

pub use idem_core::{Digest, RecordState};
use idem_core::{DuplicateContext, Operation, OutcomeSummary};

use crate::clock::StoreClock;
use crate::holder::Holder;

/// Default cap on an outcome's body: 64 KiB.
pub const DEFAULT_MAX_OUTCOME_BYTES: usize = 64 * 1024;

/// Longest stored error text; longer text is cut (on a character boundary)
/// and marked with [`TRUNCATION_MARK`]. Error text is diagnostic, so cutting
/// it is safer than refusing the write that reports a failure.
pub const MAX_ERROR_BYTES: usize = 4096;

/// Appended to error text that was cut to [`MAX_ERROR_BYTES`].
pub const TRUNCATION_MARK: &str = " …[truncated]";

/// Longest canonical operation a record keeps, in bytes (16 KiB); a longer
/// one is not kept ([`NotKept::TooLarge`]). An operation may be 64 KiB: the
/// bound keeps a store of millions of records from quadrupling in size for
/// the rare large operation, which then cannot be diffed.
pub const MAX_KEPT_OPERATION_BYTES: usize = 16 * 1024;

/// What a record keeps of the business operation that made it, so that its
/// key can be derived again offline (`idem diff --store`) with another
/// version of the policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeptOperation {
    /// The canonical operation as JSON text (the host's canonical spelling
    /// of kind, tenant and fields; at most [`MAX_KEPT_OPERATION_BYTES`]).
    Kept(String),
    /// Not kept, and why: such a record cannot be diffed.
    NotKept(NotKept),
}

/// Why a record keeps no operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotKept {
    /// The canonical operation was longer than [`MAX_KEPT_OPERATION_BYTES`].
    TooLarge {
        /// Its length in bytes.
        bytes: usize,
    },
    /// The host was configured not to keep operations
    /// ([`StoreOptions::keep_operations`] or the engine's option).
    OffByHost,
    /// The policy said its operations carry sensitive fields.
    OffByPolicy,
}

impl fmt::Display for NotKept {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NotKept::TooLarge { bytes } => write!(
                f,
                "its operation ({bytes} bytes) was larger than the {MAX_KEPT_OPERATION_BYTES} kept"
            ),
            NotKept::OffByHost => f.write_str("the host was configured not to keep operations"),
            NotKept::OffByPolicy => f.write_str("its policy asked for operations not to be kept"),
        }
    }
}

impl KeptOperation {
    /// The column spelling: the JSON text itself (an object, so it starts
    /// with `{`), or `!` and the reason it was not kept (`!too-large N`,
    /// `!off-by-host`, `!off-by-policy`): one nullable text column, no
    /// ambiguity.
    pub fn to_column(&self) -> String {
        match self {
            KeptOperation::Kept(text) => text.clone(),
            KeptOperation::NotKept(NotKept::TooLarge { bytes }) => format!("!too-large {bytes}"),
            KeptOperation::NotKept(NotKept::OffByHost) => "!off-by-host".to_string(),
            KeptOperation::NotKept(NotKept::OffByPolicy) => "!off-by-policy".to_string(),
        }
    }

    /// Reads [`KeptOperation::to_column`]'s spelling back.
    pub fn from_column(text: &str) -> Result<Self, String> {
        if text.starts_with('{') {
            return Ok(KeptOperation::Kept(text.to_string()));
        }
        match text {
            "!off-by-host" => Ok(KeptOperation::NotKept(NotKept::OffByHost)),
            "!off-by-policy" => Ok(KeptOperation::NotKept(NotKept::OffByPolicy)),
            _ => text
                .strip_prefix("!too-large ")
                .and_then(|n| n.parse().ok())
                .map(|bytes| KeptOperation::NotKept(NotKept::TooLarge { bytes }))
                .ok_or_else(|| {
                    // 64 characters are at most 256 bytes: bounded.
                    let shown: String = text.chars().take(64).collect();
                    format!("`{shown}` is not a kept operation")
                }),
        }
    }

    /// The operation's JSON text, when it was kept.
    pub fn text(&self) -> Option<&str> {
        match self {
            KeptOperation::Kept(text) => Some(text),
            KeptOperation::NotKept(_) => None,
        }
    }

    /// What a store keeps of `self` under `options`: nothing beyond the
    /// bound, nothing when the host turned keeping off.
    pub(crate) fn bounded(self, options: &StoreOptions) -> Self {
        match self {
            KeptOperation::Kept(_) if !options.keep_operations => {
                KeptOperation::NotKept(NotKept::OffByHost)
            }
            KeptOperation::Kept(text) if text.len() > MAX_KEPT_OPERATION_BYTES => {
                KeptOperation::NotKept(NotKept::TooLarge { bytes: text.len() })
            }
            other => other,
        }
    }
}

/// What identifies a record: keys of different namespaces never collide.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RecordKey {
    /// The policy's namespace.
    pub namespace: String,
    /// The SHA-256 key the engine derived (the record's key within its
    /// namespace).
    pub digest: Digest,
}

impl RecordKey {
    /// A key in a namespace.
    pub fn new(namespace: impl Into<String>, digest: Digest) -> Self {
        RecordKey {
            namespace: namespace.into(),
            digest,
        }
    }
}

impl fmt::Display for RecordKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.digest)
    }
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
    /// The business operation that made the record, as kept by its first
    /// claim (a take-over keeps it); `None` on a record written before
    /// stores kept operations, or by a caller that gave none.
    pub operation: Option<KeptOperation>,
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

/// How a holder ends its attempt: [`Writes::complete`](crate::Writes::complete) or [`Writes::fail`](crate::Writes::fail).
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
            Ending::Failed { retryable: true } => RecordState::FailedRetryable,
            Ending::Failed { retryable: false } => RecordState::FailedPermanent,
        }
    }
}

/// One holder's end of its attempt, for [`Writes::finish_many`](crate::Writes::finish_many).
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

/// One grouped write, for [`Writes::write_many`](crate::Writes::write_many): a claim or a holder's end.
// Moved once into a group commit's line and out into a batch: boxing the
// larger variant would cost every claim an allocation for nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Write {
    /// [`Writes::claim`](crate::Writes::claim).
    Claim(ClaimRequest),
    /// [`Writes::complete`](crate::Writes::complete) or [`Writes::fail`](crate::Writes::fail).
    Finish(Finish),
}

/// What one [`Write`] got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteOutcome {
    /// A claim's outcome.
    Claim(ClaimOutcome),
    /// A finish was written.
    Finished,
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
    /// The host's digest of the canonical business operation, for the
    /// attempt log (see [`crate::AttemptEntry::operation_digest`]); `None`
    /// when the caller has none.
    pub operation_digest: Option<Digest>,
    /// The canonical operation to keep with the record (see
    /// [`KeptOperation`]); the store keeps it only within
    /// [`MAX_KEPT_OPERATION_BYTES`] and while
    /// [`StoreOptions::keep_operations`] is on, and says why not otherwise.
    /// A text that is not a JSON object is refused
    /// ([`StoreError::InvalidRequest`]).
    pub operation: Option<KeptOperation>,
    /// The claimer's ownership epoch, when it works under partitioned
    /// ownership: the store refuses the claim
    /// ([`StoreError::StaleEpoch`]) unless it is the group's current epoch.
    /// `None` (the default) checks nothing.
    pub ownership: Option<OwnershipToken>,
}

/// Proof of ownership under a membership: the group and the epoch that
/// [`Ownership::join_membership`](crate::Ownership::join_membership) returned.
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

/// What [`Ownership::acquire_job_lease`](crate::Ownership::acquire_job_lease) got.
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

/// Which records [`Records::list`](crate::Records::list) returns, most recently updated first.
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
    /// Whether this process writes the attempt log (default: yes). Off, its
    /// claims, ends and answers leave no entries: `idem report` cannot say
    /// why they ran twice, and `idem review` shows their records without a
    /// timeline. For a caller that cannot spare the log's cost (two
    /// entries per begin+complete, written in the same transactions; see
    /// `docs/benchmarks.md`); the records and their guarantees are the
    /// same.
    pub attempt_log: bool,
    /// Whether opening may create the store or bring an older schema up to
    /// date (default: yes). Off — for commands that only read — a store
    /// that does not exist (a SQLite file, a PostgreSQL schema) or whose
    /// schema is older than this build's is refused with
    /// [`crate::StoreError::NotMigrated`] and nothing is created: a
    /// mistyped `?idem_schema=` is an error, not a new empty store.
    pub migrate: bool,
    /// Whether records keep the canonical operation their claim carried
    /// (default: yes). Off, every record says
    /// [`NotKept::OffByHost`] instead: for a service whose operations carry
    /// fields that must not sit in the store. Its records cannot be diffed
    /// (`idem diff --store` cannot derive their keys again with another
    /// policy version, and says so), and an activation cannot prove that
    /// an upgrade keeps their keys.
    pub keep_operations: bool,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            clock: StoreClock::system(),
            max_outcome_bytes: DEFAULT_MAX_OUTCOME_BYTES,
            attempt_log: true,
            migrate: true,
            keep_operations: true,
        }
    }
}
