//! What can go wrong in a store.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use idem_core::RecordState;
use thiserror::Error;

use crate::RecordKey;

/// Why a store file could not be opened. Nothing was written to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum OpenErrorKind {
    /// The path is a directory.
    IsADirectory,
    /// The path is neither a file nor absent (a socket, a device...).
    NotAFile,
    /// The file, or a directory on its path, cannot be read or created.
    Unreadable,
    /// The file or its directory is read-only (a store must write).
    ReadOnly,
    /// The file is not a SQLite database.
    NotADatabase,
    /// The file is a SQLite database of another application.
    NotAnIdemStore,
}

impl fmt::Display for OpenErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            OpenErrorKind::IsADirectory => "it is a directory",
            OpenErrorKind::NotAFile => "it is not a regular file",
            OpenErrorKind::Unreadable => "it cannot be opened",
            OpenErrorKind::ReadOnly => "it is read-only",
            OpenErrorKind::NotADatabase => "it is not a SQLite database",
            OpenErrorKind::NotAnIdemStore => "it is a SQLite database but not an idem store",
        })
    }
}

/// Why a database store (PostgreSQL) could not be reached or opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConnectErrorKind {
    /// Nothing answered: connection refused, unknown host, timeout.
    Unreachable,
    /// The server refused the credentials.
    Auth,
    /// The TLS handshake failed (or the server does not offer TLS although
    /// `sslmode` requires it).
    Tls,
    /// The database named in the URL does not exist.
    NoSuchDatabase,
    /// The role may not do what opening needs (create the schema, its
    /// tables).
    Permission,
    /// The schema holds tables of another application (a `records` table
    /// but no idem migration history): refused rather than modified.
    ForeignSchema,
    /// Anything else the server or the client reported.
    Other,
}

impl fmt::Display for ConnectErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ConnectErrorKind::Unreachable => "the server is unreachable",
            ConnectErrorKind::Auth => "authentication failed",
            ConnectErrorKind::Tls => "TLS failed",
            ConnectErrorKind::NoSuchDatabase => "the database does not exist",
            ConnectErrorKind::Permission => "permission denied",
            ConnectErrorKind::ForeignSchema => "the schema belongs to another application",
            ConnectErrorKind::Other => "the connection failed",
        })
    }
}

/// A store error: a refusal (the call changed nothing) or a failure of the
/// store, as [`StoreError::class`] says. The first five variants are
/// conflicts, the next ones refused requests, the rest failures.
/// Cloned for a failure several callers share (a group commit's batch call
/// failed: each caller in it gets the error).
#[derive(Debug, Clone, Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The caller's fence is not the record's current fence: the caller was
    /// deposed (someone took over) and its write changed nothing.
    #[error(
        "fenced: record {key} is now held under fence {current}; fence {fence} is deposed and its write changed nothing"
    )]
    Fenced {
        /// The record.
        key: RecordKey,
        /// The caller's fence.
        fence: u64,
        /// The record's current fence.
        current: u64,
    },
    /// The caller's fence is current but the record is no longer in
    /// progress (already completed, failed or marked outcome-unknown): a
    /// final record is never overwritten.
    #[error("record {key} is {}, not in progress: fence {fence} can no longer write to it", .state.as_str())]
    NotInProgress {
        /// The record.
        key: RecordKey,
        /// The caller's (current) fence.
        fence: u64,
        /// The record's state.
        state: RecordState,
    },
    /// A gate's ticket that no longer holds its key (`crate::Gates`): the
    /// admission's result was already recorded, it was released, or the
    /// gate gave up on it and admitted another holder. Nothing changed.
    #[error("gate `{gate}` refused fence {fence} on key `{key}`: {why}; nothing changed")]
    GateRefused {
        /// The gate.
        gate: String,
        /// The key.
        key: String,
        /// The ticket's fence.
        fence: u64,
        /// Why.
        why: String,
    },
    /// A take-over or mark-unknown the record's state does not allow.
    #[error("record {key} is {} and cannot be {action}: {why}", .state.as_str())]
    NotEligible {
        /// The record.
        key: RecordKey,
        /// What was refused: `taken over` or `marked outcome-unknown`.
        action: &'static str,
        /// The record's state.
        state: RecordState,
        /// Why.
        why: &'static str,
    },
    /// No live record under the key: it never existed, or it is past its
    /// retention (collected, or as good as).
    #[error("no record {key}: it never existed or it expired")]
    Gone {
        /// The record.
        key: RecordKey,
    },
    /// A claim or take-over carried an ownership epoch that is not the
    /// group's current one: the membership changed (the claimer may have
    /// been deposed while paused), so it no longer owns what it computed it
    /// owns. Nothing changed.
    #[error(
        "stale ownership epoch: group `{group}` is at epoch {current}; epoch {epoch} is superseded and its claim changed nothing"
    )]
    StaleEpoch {
        /// The group.
        group: String,
        /// The caller's epoch.
        epoch: u64,
        /// The group's current epoch (0 when the group has no membership).
        current: u64,
    },
    /// A job-lease heartbeat or release under a fence that no longer holds
    /// the lease (someone took it after it expired, or it was released).
    /// Nothing changed.
    #[error("job lease `{job}` is no longer held under fence {fence}")]
    JobLeaseLost {
        /// The job.
        job: String,
        /// The caller's fence.
        fence: u64,
    },
    /// The outcome's body is larger than the store accepts; nothing was
    /// written and the holder still holds its claim.
    #[error(
        "outcome of {size} bytes for record {key} exceeds the limit of {limit} bytes; nothing was written"
    )]
    OutcomeTooLarge {
        /// The record.
        key: RecordKey,
        /// The body's size.
        size: usize,
        /// The store's limit.
        limit: usize,
    },
    /// A namespace's registration moved on since the caller read it: the
    /// active version is no longer the one the caller checked its upgrade
    /// (or rollback) against. Nothing changed.
    #[error(
        "namespace `{namespace}` moved on: its active policy is {found}, not {expected} as checked; look again (idem policy list) and retry"
    )]
    RegistryMoved {
        /// The namespace.
        namespace: String,
        /// The active digest the caller expected (`none`: no registration).
        expected: String,
        /// The active digest found (`none`: no registration).
        found: String,
    },
    /// A malformed request (e.g. a policy digest not `sha256:<hex>`, a
    /// text holding a NUL).
    #[error("invalid store request: {0}")]
    InvalidRequest(String),
    /// The database refused a value of the request as data (PostgreSQL's
    /// SQLSTATE classes 22, data exception, and 23, integrity constraint
    /// violation): the same request gets the same answer, so it is a
    /// refusal, never an outage. Nothing was written.
    #[error("store `{store}` refused the request's data during {context}: {detail}")]
    DataRefused {
        /// The store.
        store: String,
        /// What was being done.
        context: &'static str,
        /// The server's own message, with its SQLSTATE.
        detail: String,
    },
    /// The store keeps no database a business write can share, so an
    /// effect cannot commit in its transaction (the in-memory store: nothing
    /// there is atomic with a write elsewhere), or not the kind of
    /// transaction asked for (a SQLite effect of a PostgreSQL store).
    /// Nothing was claimed or written.
    #[error(
        "store `{store}` cannot run an effect in its own transaction: {why}; nothing was claimed or written"
    )]
    NotTransactional {
        /// The store.
        store: String,
        /// Why not, and what would.
        why: String,
    },
    /// A store URL this build cannot open.
    #[error(
        "unsupported store URL `{url}`: {why}. Supported: `sqlite:PATH` (or `sqlite://PATH`, query `?synchronous=full|normal&busy_timeout_ms=N&wal_autocheckpoint=PAGES`), `postgres://USER@HOST[:PORT]/DB` (or `postgresql://`, query `?idem_schema=NAME&idem_pool_size=N&sslmode=disable|prefer|require|verify-ca|verify-full` plus libpq options) and `memory:`"
    )]
    UnsupportedUrl {
        /// The URL as given.
        url: String,
        /// What is wrong with it.
        why: String,
    },
    /// The store file could not be opened; nothing was written.
    #[error("cannot open store `{}`: {kind}: {detail}", .path.display())]
    Open {
        /// The file.
        path: PathBuf,
        /// Why, as a type.
        kind: OpenErrorKind,
        /// The underlying message.
        detail: String,
    },
    /// A database store could not be reached or opened. `url` never holds
    /// the password.
    #[error("cannot open store `{url}`: {kind}: {detail}")]
    Connect {
        /// The store URL, password masked.
        url: String,
        /// Why, as a type.
        kind: ConnectErrorKind,
        /// The underlying message.
        detail: String,
    },
    /// A database store's schema was migrated by a newer idem.
    #[error(
        "store `{store}` has schema version {found}, newer than this idem supports ({supported}): upgrade idem"
    )]
    DatabaseSchemaTooNew {
        /// The store URL (password masked) and schema.
        store: String,
        /// The schema's version.
        found: i64,
        /// The newest version this build knows.
        supported: i64,
    },
    /// Opening without migrating ([`crate::StoreOptions::migrate`] off):
    /// the store does not exist (`found: None`), exists with no idem schema
    /// (`Some(0)`: an empty SQLite file) or its schema is older than this
    /// build's. Nothing was created or changed.
    #[error(
        "store `{store}` {}: this command only reads, and neither creates nor upgrades a store (`idem migrate --store URL` does)",
        match .found { None => "does not exist".to_string(), Some(0) => "holds no idem schema yet (an empty file, or a database without idem's tables)".to_string(), Some(v) => format!("has schema version {v}, older than this idem's {}", .wanted) }
    )]
    NotMigrated {
        /// The store URL (password masked), and schema.
        store: String,
        /// Its schema version, `None` when there is no store, `Some(0)` when
        /// it holds no idem schema.
        found: Option<i64>,
        /// The version this build needs.
        wanted: i64,
    },
    /// The store was written by a newer idem.
    #[error("store `{}` has schema version {found}, newer than this idem supports ({supported}): upgrade idem", .path.display())]
    SchemaTooNew {
        /// The file.
        path: PathBuf,
        /// The file's schema version.
        found: i64,
        /// The newest version this build knows.
        supported: i64,
    },
    /// The database stayed locked by others past the busy timeout.
    #[error(
        "store `{store}` is busy (locked by another connection past the busy timeout) during {context}"
    )]
    Busy {
        /// The store.
        store: String,
        /// What was being done.
        context: &'static str,
    },
    /// A stored row that does not decode (hand-edited or corrupt database).
    #[error("store `{store}` holds a corrupt record: {what}")]
    Corrupt {
        /// The store.
        store: String,
        /// What is wrong.
        what: String,
    },
    /// The storage backend failed.
    #[error("store `{store}` failed during {context}: {cause}")]
    Backend {
        /// The store.
        store: String,
        /// What was being done.
        context: &'static str,
        /// The backend's error, shown in the message. Not also exposed as
        /// [`std::error::Error::source`]: a report that prints the chain
        /// (`{:#}`) would show it twice.
        cause: Arc<dyn std::error::Error + Send + Sync>,
    },
    /// The blocking task running a store call panicked or was cancelled.
    #[error("store task failed: {0}")]
    Task(String),
}

/// A backend failure's cause from a message or an error.
pub(crate) fn cause(
    cause: impl Into<Box<dyn std::error::Error + Send + Sync>>,
) -> Arc<dyn std::error::Error + Send + Sync> {
    Arc::from(cause.into())
}

// Exhaustive on purpose (not `#[non_exhaustive]`): every error is exactly one of these three,
// and a caller decides by them (look again, give up, wait).
/// Whose an error is, and whether waiting can change it: a refusal (the
/// store refused the call and changed nothing) or a failure (the store's
/// own). Every [`StoreError`] has exactly one ([`StoreError::class`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorClass {
    /// Refused because of the record's state or fence: a lost race, a
    /// deposed holder, a record gone. Nothing changed; look again.
    Conflict,
    /// Refused because of the request itself: invalid, too large, a stale
    /// ownership epoch, a job lease no longer held, a registry that moved.
    /// Nothing changed; sending it again gets the same answer.
    Refused,
    /// The store could not serve the call just now: unreachable, a
    /// connection dropped, the disk full or failing, the database locked
    /// past the busy timeout. The call may or may not have been applied (a
    /// commit whose answer was lost), and the same call may succeed once
    /// the store is back: a caller that can wait (a job) retries it, every
    /// write still conditional on its fence.
    Unavailable,
    /// The store failed in a way waiting does not change: it cannot be
    /// opened, its schema is not one this idem knows, a row is corrupt.
    Failed,
}

impl StoreError {
    /// Whose this error is, and whether waiting can change it. A match
    /// without a catch-all: a new variant must say which it is.
    pub fn class(&self) -> ErrorClass {
        use StoreError::*;
        match self {
            Fenced { .. }
            | NotInProgress { .. }
            | NotEligible { .. }
            | Gone { .. }
            | GateRefused { .. } => ErrorClass::Conflict,
            StaleEpoch { .. }
            | JobLeaseLost { .. }
            | OutcomeTooLarge { .. }
            | RegistryMoved { .. }
            | InvalidRequest(_)
            | DataRefused { .. }
            | NotTransactional { .. }
            | UnsupportedUrl { .. } => ErrorClass::Refused,
            Backend { .. } | Busy { .. } | Task(_) => ErrorClass::Unavailable,
            Connect { kind, .. } => match kind {
                ConnectErrorKind::Unreachable | ConnectErrorKind::Other => ErrorClass::Unavailable,
                _ => ErrorClass::Failed,
            },
            Open { .. }
            | DatabaseSchemaTooNew { .. }
            | NotMigrated { .. }
            | SchemaTooNew { .. }
            | Corrupt { .. } => ErrorClass::Failed,
        }
    }

    /// Whether the store refused the call (nothing changed) as opposed to
    /// failing: a conflict or a refused request.
    pub fn is_refusal(&self) -> bool {
        matches!(self.class(), ErrorClass::Conflict | ErrorClass::Refused)
    }

    /// Whether the store itself could not serve the call just now
    /// ([`ErrorClass::Unavailable`]): waiting may change the answer. A
    /// refusal, a corrupt record or a schema this idem does not know is
    /// never "unavailable".
    pub fn is_unavailable(&self) -> bool {
        self.class() == ErrorClass::Unavailable
    }

    /// Whether the call was refused because of the record's state or fence
    /// ([`ErrorClass::Conflict`]): nothing changed.
    pub fn is_conflict(&self) -> bool {
        self.class() == ErrorClass::Conflict
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_backend_error_shows_its_cause_once() {
        let e = StoreError::Backend {
            store: "sqlite:x.db".into(),
            context: "claiming",
            cause: cause("disk I/O error"),
        };
        assert_eq!(
            e.to_string(),
            "store `sqlite:x.db` failed during claiming: disk I/O error"
        );
        // A chain printer (anyhow's `{:#}`) appends every source: none here.
        assert!(std::error::Error::source(&e).is_none());
    }
}
