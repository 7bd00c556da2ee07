//! idem's record stores.
//!
//! A store keeps one record per `(namespace, key)` and decides, atomically and
//! by its own clock, who may execute an effect:
//!
//! - [`Writes::claim`] inserts an in-progress record under a new fencing token
//!   ("fence"), or reports the existing record ([`Existing`]) so that the
//!   engine can ask the policy what a duplicate gets;
//! - [`Records::take_over`] re-executes after a retryable failure, an unknown
//!   outcome or an expired lease, under a new, higher fence;
//! - [`Writes::complete`], [`Writes::fail`] and [`Records::heartbeat`] are
//!   conditional on the holder's fence still being current: a deposed holder
//!   gets [`StoreError::Fenced`] and changes nothing.
//!
//! Rules every store follows (the `idem-store-conformance` crate checks
//! them; the memory, SQLite and PostgreSQL stores all pass it):
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
//!   [`Records::gc`] had already removed it: [`Records::get`] does not return it,
//!   [`Writes::claim`] replaces it (under a new fence), and writes to it report
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
//!   membership changes ([`Ownership::join_membership`]). A claim or take-over
//!   carrying an [`OwnershipToken`] that is not the group's current epoch is
//!   [`StoreError::StaleEpoch`] and changes nothing. The epoch gates the
//!   *start* of an effect; the fence still gates every write after it.
//! - **An attempt log** ([`Records::attempts`]): every claim, take-over, end,
//!   mark-unknown, refused late write and resolution appends an entry in
//!   the same transaction as the change it describes; answers to
//!   duplicates are appended by [`Records::log_answers`]; entries go with
//!   their record on [`Records::gc`].
//! - **Job leases** ([`Ownership::acquire_job_lease`]): one live holder per job
//!   name, by the store clock, fenced from the same fence sequence; an
//!   efficiency measure, never what correctness rests on.
//!
//! This crate knows nothing of WebAssembly or policies.
//!
//! A [`Store`] is a few capabilities, each a port of its own: [`Writes`]
//! (claims and ends, alone or in batches), [`Records`] (the rest of a
//! record's life, reads, gc, the attempt log), [`Ownership`] (memberships,
//! epochs, job leases) and [`PolicyRegistry`]; beside them,
//! [`Transactions`] (the store's own database, for an effect whose writes
//! commit with its end) and [`Gates`] (the gate a downstream keeps in front
//! of its writes: a `(key, fence)` admitted once, a repeat replayed, a
//! lower fence refused). Callers name the one they
//! use (`store.writes().claim(…)`); a wrapper replaces only the capability
//! it changes ([`GroupCommit`]: the writes).
//!
//! Stores are async (each port is an `async_trait`, used as a trait object
//! since the store is chosen by URL at run time) and must be called inside
//! a tokio runtime: the SQLite store runs its blocking calls in place on a
//! multi-threaded runtime's worker (`block_in_place`) and on tokio's
//! blocking pool otherwise; the PostgreSQL store (module `postgres`) is
//! async throughout.
//!
//! How it is built: every store call is written once (`execute/`) over
//! small backend ports (`backend/`): a backend locks one record in its own
//! way (a mutex, `BEGIN IMMEDIATE`, `SELECT … FOR UPDATE`), the shared
//! state machine (`machine/`) decides, and the backend saves what was
//! decided. A backend's one-statement fast paths are checked against the
//! machine in debug builds. Backends are cargo features: `sqlite` and
//! `postgres`, both on by default; each is laid out alike (`connection`,
//! `schema`, `row`, then one file per port: `records`, `ownership`,
//! `policy_registry`).

#![warn(missing_docs)]

mod backend;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod codec;
mod execute;
mod group_commit;
mod machine;
mod memory;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod migrations;
mod open;
mod port;
mod postgres;
mod sqlite;
mod store;
mod url;
mod vocabulary;

pub use group_commit::{GroupCommit, GroupCommitOptions, GroupCommitStats, LaneStats};
pub use memory::MemoryStore;
pub use open::{migrate, open};
pub use port::{
    Batching, Database, Gates, Ownership, PolicyRegistry, Records, Transactions, Writes,
};
pub use postgres::{DEFAULT_POOL_SIZE, DEFAULT_SCHEMA, PostgresUrl, TlsMode};
#[cfg(feature = "postgres")]
pub use postgres::{
    FENCED_SQLSTATE, INVALID_COMPLETION_SQLSTATE, POSTGRES_SCHEMA_VERSION, PostgresStore,
};
/// The SQLite driver the store runs on, re-exported so that an effect in
/// the store's transaction names the very `rusqlite::Transaction` it is
/// handed (no second version of the crate to match).
#[cfg(feature = "sqlite")]
pub use rusqlite;
#[cfg(feature = "sqlite")]
pub use sqlite::{SCHEMA_VERSION, SqliteStore};
pub use sqlite::{SqliteOptions, Synchronous};
pub use store::Store;
/// The PostgreSQL client the store runs on, re-exported so that an effect
/// in the store's transaction names the very `tokio_postgres::Transaction`
/// it is handed.
#[cfg(feature = "postgres")]
pub use tokio_postgres;
pub use url::{StoreUrl, redacted_url};
pub use vocabulary::{
    AMENDS, Activation, Admission, AttemptEntry, AttemptEvent, AttemptFilter, CallerName, Claim,
    ClaimOutcome, ClaimRequest, ConnectErrorKind, DEFAULT_MAX_OUTCOME_BYTES, Digest, DualRead,
    EXPIRED_WITHOUT_EFFECT, EffectError, Ending, ErrorClass, Existing, Finish, GateEntry,
    GateRequest, GateRun, GateState, GateTicket, Holder, HolderToken, JobLease, JobLeaseAcquire,
    KeptOperation, ListCursor, ListFilter, MAX_ERROR_BYTES, MAX_GATE_KEY_BYTES, MAX_HISTORY,
    MAX_KEPT_OPERATION_BYTES, MAX_NOTE_BYTES, ManualClock, Membership, NotKept, OpenErrorKind,
    Outcome, OwnershipToken, Record, RecordKey, RecordState, RecordView, Registration,
    RegistryAction, RegistryEvent, Resolution, ResolveRequest, Rollback, StoreClock, StoreError,
    StoreOptions, TRUNCATION_MARK, TxEnd, Write, WriteOutcome,
};
