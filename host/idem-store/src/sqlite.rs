//! The SQLite store: the embedded default.
//!
//! - **Durability**: WAL, `synchronous=FULL` by default (a completed record
//!   survives power loss); `?synchronous=normal` trades the last commits on
//!   power loss (never on a process crash) for fewer fsyncs.
//! - **Transactions**: every write is `BEGIN IMMEDIATE`: it takes SQLite's
//!   write lock up front, so two processes never both read a record and then
//!   race to upgrade (which WAL would refuse with `SQLITE_BUSY_SNAPSHOT`),
//!   and the store clock is read *after* the lock is held, so "now" is
//!   ordered with the writes it decides. Other connections wait up to
//!   `busy_timeout`.
//! - **Several processes** may open the same file: all coordination goes
//!   through SQLite's file locks and the transactions above, and fences come
//!   from a sequence row updated in the claim's own transaction.
//! - **Threads**: SQLite calls block, so each runs on tokio's blocking pool
//!   (`spawn_blocking`). A store owns one connection behind a mutex: SQLite
//!   admits one writer at a time anyway and nearly every call writes, so a
//!   pool would only add connections waiting on the same lock. Open several
//!   stores (as several processes do) for independent connections.
//! - **Schema**: versioned by `PRAGMA user_version`, migrated on open inside
//!   one `BEGIN IMMEDIATE` transaction (so racing openers migrate once);
//!   `PRAGMA application_id` marks the file as an idem store so that another
//!   application's database is refused rather than modified.

use std::path::Path;
use std::sync::LazyLock;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use idem_core::{Digest, RecordState};
use rusqlite::{
    Connection, ErrorCode, OpenFlags, OptionalExtension, Transaction, TransactionBehavior,
};

use crate::machine::{self, ClaimStep, JobStep};
use crate::{
    Claim, ClaimOutcome, ClaimRequest, Finish, Holder, JobLease, JobLeaseAcquire, ListFilter,
    Membership, OpenErrorKind, Outcome, OwnershipToken, Record, RecordKey, RecordView, Store,
    StoreError, StoreOptions,
};

/// The newest schema version this build knows: 1 records and fences; 2
/// memberships with their epochs, and job leases.
pub const SCHEMA_VERSION: i64 = 2;

/// `PRAGMA application_id` of an idem store: "idem" in ASCII.
const APPLICATION_ID: i64 = 0x6964_656d;

/// Migration `i` takes the schema from version `i` to `i + 1`. Append only.
const MIGRATIONS: &[&str] = &[
    "
    CREATE TABLE fence_seq (
        id   INTEGER PRIMARY KEY CHECK (id = 1),
        last INTEGER NOT NULL CHECK (last >= 0)
    );
    INSERT INTO fence_seq (id, last) VALUES (1, 0);
    CREATE TABLE records (
        namespace      TEXT    NOT NULL,
        key            BLOB    NOT NULL CHECK (length(key) = 32),
        policy_digest  TEXT    NOT NULL,
        fingerprint    BLOB    NOT NULL CHECK (length(fingerprint) = 32),
        partition      TEXT    NOT NULL,
        state          TEXT    NOT NULL CHECK (state IN ('in-progress', 'completed',
                           'failed-retryable', 'failed-permanent', 'outcome-unknown')),
        fence          INTEGER NOT NULL,
        lease_until    INTEGER NOT NULL,
        attempts       INTEGER NOT NULL,
        created        INTEGER NOT NULL,
        updated        INTEGER NOT NULL,
        retention_ms   INTEGER NOT NULL,
        retain_until   INTEGER NOT NULL,
        outcome_status INTEGER,
        outcome_body   BLOB,
        outcome_error  TEXT,
        holder_run_id  TEXT,
        holder_trigger TEXT,
        holder_attempt INTEGER,
        holder_host    TEXT    NOT NULL,
        holder_pid     INTEGER NOT NULL,
        PRIMARY KEY (namespace, key)
    ) WITHOUT ROWID;
    CREATE INDEX records_retain_until ON records (retain_until);
    CREATE INDEX records_updated ON records (updated);
",
    "
    CREATE TABLE epoch_seq (
        id   INTEGER PRIMARY KEY CHECK (id = 1),
        last INTEGER NOT NULL CHECK (last >= 0)
    );
    INSERT INTO epoch_seq (id, last) VALUES (1, 0);
    CREATE TABLE memberships (
        grp     TEXT    NOT NULL PRIMARY KEY,
        epoch   INTEGER NOT NULL CHECK (epoch > 0),
        members TEXT    NOT NULL,
        updated INTEGER NOT NULL
    ) WITHOUT ROWID;
    CREATE TABLE job_leases (
        job         TEXT    NOT NULL PRIMARY KEY,
        holder      TEXT    NOT NULL,
        fence       INTEGER NOT NULL CHECK (fence > 0),
        lease_until INTEGER NOT NULL
    ) WITHOUT ROWID;
",
];

const COLUMNS: &str = "namespace, key, policy_digest, fingerprint, partition, state, fence, lease_until, attempts, \
     created, updated, retention_ms, retain_until, outcome_status, outcome_body, outcome_error, holder_run_id, \
     holder_trigger, holder_attempt, holder_host, holder_pid";

/// The `synchronous` setting (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Synchronous {
    /// fsync on every commit: durable across power loss (the default).
    #[default]
    Full,
    /// fsync at checkpoints only: durable across process crashes; the last
    /// commits may be lost on power loss.
    Normal,
}

impl Synchronous {
    fn pragma(self) -> &'static str {
        match self {
            Synchronous::Full => "FULL",
            Synchronous::Normal => "NORMAL",
        }
    }
}

/// SQLite-specific options (from the URL's query).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SqliteOptions {
    /// `synchronous` (default FULL).
    pub synchronous: Synchronous,
    /// How long a call waits for another connection's lock (default 5 s).
    pub busy_timeout: Duration,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        SqliteOptions {
            synchronous: Synchronous::Full,
            busy_timeout: Duration::from_secs(5),
        }
    }
}

/// A store in a SQLite file. Cheap to clone (clones share the connection).
#[derive(Debug, Clone)]
pub struct SqliteStore {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    conn: Mutex<Connection>,
    /// `sqlite:PATH`, for messages.
    name: String,
    options: StoreOptions,
}

impl SqliteStore {
    /// Opens (creating if absent) the store at `path` and migrates its
    /// schema. Blocks: call it from a blocking context (or use
    /// [`crate::open`]).
    ///
    /// A path that is a directory, unreadable, read-only, not a SQLite
    /// database, another application's database or of a newer schema is
    /// refused with a typed error, and nothing is written to it.
    pub fn open(
        path: &Path,
        sqlite: SqliteOptions,
        options: StoreOptions,
    ) -> Result<Self, StoreError> {
        let refuse = |kind, detail: String| StoreError::Open {
            path: path.to_path_buf(),
            kind,
            detail,
        };
        match std::fs::metadata(path) {
            Ok(meta) if meta.is_dir() => {
                return Err(refuse(
                    OpenErrorKind::IsADirectory,
                    "a store is a file".into(),
                ));
            }
            Ok(meta) if !meta.is_file() => {
                return Err(refuse(OpenErrorKind::NotAFile, "a store is a file".into()));
            }
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                // SQLite would only say "unable to open database file".
                let parent = path.parent().filter(|p| !p.as_os_str().is_empty());
                if let Some(dir) = parent.filter(|d| !d.is_dir()) {
                    let detail = format!("its directory `{}` does not exist", dir.display());
                    return Err(refuse(OpenErrorKind::Unreadable, detail));
                }
            }
            Err(e) => return Err(refuse(OpenErrorKind::Unreadable, e.to_string())),
        }
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn =
            Connection::open_with_flags(path, flags).map_err(|e| open_error(path, "opening", e))?;
        // SQLite silently falls back to read-only when it may not write.
        if conn
            .is_readonly(rusqlite::MAIN_DB)
            .map_err(|e| open_error(path, "opening", e))?
        {
            return Err(refuse(
                OpenErrorKind::ReadOnly,
                "the file is not writable".into(),
            ));
        }
        conn.busy_timeout(sqlite.busy_timeout)
            .map_err(|e| open_error(path, "setting busy_timeout", e))?;

        // Read-only checks first: a foreign, corrupt or newer file is refused
        // before the switch to WAL (which writes the header). One read
        // transaction, so that the checks see one snapshot even while
        // another process is creating the schema.
        conn.execute_batch("BEGIN DEFERRED")
            .map_err(|e| open_error(path, "reading the header", e))?;
        let checked = identify(&conn, path);
        // Ending a read transaction cannot lose anything.
        let _ = conn.execute_batch("COMMIT");
        let found = checked?;

        let mode = switch_to_wal(&conn, sqlite.busy_timeout)
            .map_err(|e| open_error(path, "switching to WAL", e))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(refuse(
                OpenErrorKind::Unreadable,
                format!("SQLite refused WAL mode (journal_mode is {mode})"),
            ));
        }
        conn.pragma_update(None, "synchronous", sqlite.synchronous.pragma())
            .map_err(|e| open_error(path, "setting synchronous", e))?;
        if found < SCHEMA_VERSION {
            migrate(&conn, path)?;
        }
        let name = format!("sqlite:{}", path.display());
        Ok(SqliteStore {
            inner: Arc::new(Inner {
                conn: Mutex::new(conn),
                name,
                options,
            }),
        })
    }

    /// The file's schema version (for `idem inspect` and tests).
    pub async fn schema_version(&self) -> Result<i64, StoreError> {
        self.blocking(|inner| {
            let conn = inner.conn();
            conn.pragma_query_value(None, "user_version", |row| row.get(0))
                .map_err(|e| inner.err("reading user_version", e))
        })
        .await
    }

    /// The connection's `synchronous` setting, as SQLite reports it.
    pub async fn synchronous(&self) -> Result<Synchronous, StoreError> {
        self.blocking(|inner| {
            let conn = inner.conn();
            let level: i64 = conn
                .pragma_query_value(None, "synchronous", |row| row.get(0))
                .map_err(|e| inner.err("reading synchronous", e))?;
            match level {
                1 => Ok(Synchronous::Normal),
                2 => Ok(Synchronous::Full),
                other => Err(inner.corrupt(format!(
                    "synchronous is {other}, not NORMAL (1) or FULL (2)"
                ))),
            }
        })
        .await
    }

    /// Runs `f` on the blocking pool.
    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Inner) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let inner = self.inner.clone();
        // On a multi-threaded runtime the call runs right here, with the
        // worker marked as blocking: a SQLite call takes tens of µs, and
        // handing it to the blocking pool and back (two thread switches)
        // cost several times that. A current-thread runtime cannot block in
        // place, so there it goes to the blocking pool. Either way, if the
        // caller drops the future the call still runs to its end: like any
        // database call, a cancelled write may or may not have happened, and
        // the fence keeps that safe.
        let multi_thread = tokio::runtime::Handle::try_current()
            .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
        if multi_thread {
            return tokio::task::block_in_place(move || f(&inner));
        }
        tokio::task::spawn_blocking(move || f(&inner))
            .await
            .map_err(|e| StoreError::Task(e.to_string()))?
    }
}

/// Puts the file in WAL mode (a no-op when it already is), returning the
/// journal mode SQLite settled on.
///
/// Changing the journal mode needs an exclusive lock and SQLite does not run
/// the busy handler for it: when several processes open a new file at once,
/// all but one get `SQLITE_BUSY`. So retry, within the busy timeout.
fn switch_to_wal(conn: &Connection, busy_timeout: Duration) -> rusqlite::Result<String> {
    let mode: String = conn.pragma_query_value(None, "journal_mode", |row| row.get(0))?;
    if mode.eq_ignore_ascii_case("wal") {
        return Ok(mode);
    }
    let deadline = std::time::Instant::now() + busy_timeout;
    loop {
        match conn
            .pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get::<_, String>(0))
        {
            Err(e)
                if e.sqlite_error_code() == Some(ErrorCode::DatabaseBusy)
                    && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(5));
            }
            other => return other,
        }
    }
}

/// The schema version, refusing what is not an idem store (by its
/// application id) or is newer than this build.
fn identify(conn: &Connection, path: &Path) -> Result<i64, StoreError> {
    let refuse = |kind, detail: String| StoreError::Open {
        path: path.to_path_buf(),
        kind,
        detail,
    };
    let version: i64 = conn
        .pragma_query_value(None, "user_version", |row| row.get(0))
        .map_err(|e| open_error(path, "reading the schema version", e))?;
    let app: i64 = conn
        .pragma_query_value(None, "application_id", |row| row.get(0))
        .map_err(|e| open_error(path, "reading the application id", e))?;
    if app != APPLICATION_ID {
        let tables: i64 = conn
            .query_row("SELECT count(*) FROM sqlite_master", [], |row| row.get(0))
            .map_err(|e| open_error(path, "reading the schema", e))?;
        if app != 0 || version != 0 || tables != 0 {
            return Err(refuse(
                OpenErrorKind::NotAnIdemStore,
                format!(
                    "application_id is {app:#x} (idem's is {APPLICATION_ID:#x}) and it holds {tables} schema objects"
                ),
            ));
        }
    }
    if version > SCHEMA_VERSION {
        return Err(StoreError::SchemaTooNew {
            path: path.to_path_buf(),
            found: version,
            supported: SCHEMA_VERSION,
        });
    }
    Ok(version)
}

/// Brings the schema to [`SCHEMA_VERSION`] in one immediate transaction;
/// re-reads the version under the lock, since another process may have
/// migrated meanwhile.
fn migrate(conn: &Connection, path: &Path) -> Result<(), StoreError> {
    conn.execute_batch("BEGIN IMMEDIATE")
        .map_err(|e| open_error(path, "locking for the migration", e))?;
    let result = (|| {
        let found = identify(conn, path)?;
        for (from, sql) in MIGRATIONS
            .iter()
            .enumerate()
            .skip(usize::try_from(found).unwrap_or(usize::MAX))
        {
            conn.execute_batch(sql)
                .map_err(|e| open_error(path, "migrating the schema", e))?;
            let to = from as i64 + 1;
            conn.execute_batch(&format!(
                "PRAGMA user_version = {to}; PRAGMA application_id = {APPLICATION_ID};"
            ))
            .map_err(|e| open_error(path, "migrating the schema", e))?;
        }
        conn.execute_batch("COMMIT")
            .map_err(|e| open_error(path, "committing the migration", e))
    })();
    if result.is_err() {
        // Best effort: the error being returned says what went wrong.
        let _ = conn.execute_batch("ROLLBACK");
    }
    result
}

/// Classifies an error met while opening.
fn open_error(path: &Path, context: &'static str, e: rusqlite::Error) -> StoreError {
    let kind = match e.sqlite_error_code() {
        Some(ErrorCode::NotADatabase) => OpenErrorKind::NotADatabase,
        Some(ErrorCode::ReadOnly) => OpenErrorKind::ReadOnly,
        Some(ErrorCode::CannotOpen | ErrorCode::PermissionDenied) => OpenErrorKind::Unreadable,
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => {
            return StoreError::Busy {
                store: format!("sqlite:{}", path.display()),
                context,
            };
        }
        _ => {
            return StoreError::Backend {
                store: format!("sqlite:{}", path.display()),
                context,
                source: Box::new(e),
            };
        }
    };
    StoreError::Open {
        path: path.to_path_buf(),
        kind,
        detail: format!("{context}: {e}"),
    }
}

impl Inner {
    fn conn(&self) -> MutexGuard<'_, Connection> {
        // A panic mid-call unwinds through the `Transaction`, which rolls
        // back: the connection is clean, so a poisoned lock is safe to reuse.
        self.conn
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn err(&self, context: &'static str, e: rusqlite::Error) -> StoreError {
        match e.sqlite_error_code() {
            Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => StoreError::Busy {
                store: self.name.clone(),
                context,
            },
            _ => StoreError::Backend {
                store: self.name.clone(),
                context,
                source: Box::new(e),
            },
        }
    }

    fn corrupt(&self, what: String) -> StoreError {
        StoreError::Corrupt {
            store: self.name.clone(),
            what,
        }
    }

    /// One write transaction: `BEGIN IMMEDIATE`, the store clock read under
    /// the lock, `f`, commit. An error from `f` rolls back: nothing changes.
    fn write<T>(
        &self,
        context: &'static str,
        f: impl FnOnce(&Transaction<'_>, u64) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut conn = self.conn();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| self.err(context, e))?;
        let now = self.options.clock.now_ms();
        let out = f(&tx, now)?;
        tx.commit().map_err(|e| self.err(context, e))?;
        Ok(out)
    }

    fn load(&self, tx: &Connection, key: &RecordKey) -> Result<Option<Record>, StoreError> {
        // Cached statements: parsing the SQL cost more than running it.
        static SELECT: LazyLock<String> = LazyLock::new(|| {
            format!("SELECT {COLUMNS} FROM records WHERE namespace = ?1 AND key = ?2")
        });
        let raw = tx
            .prepare_cached(&SELECT)
            .and_then(|mut stmt| {
                stmt.query_row(
                    rusqlite::params![key.namespace, key.key.0.as_slice()],
                    Raw::from_row,
                )
                .optional()
            })
            .map_err(|e| self.err("reading a record", e))?;
        raw.map(|r| self.decode(r)).transpose()
    }

    fn save(&self, tx: &Connection, r: &Record) -> Result<(), StoreError> {
        let int = |v: u64, what: &str| {
            i64::try_from(v).map_err(|_| {
                StoreError::InvalidRequest(format!("{what} {v} does not fit the store"))
            })
        };
        let outcome = r.outcome.as_ref();
        static UPSERT: LazyLock<String> = LazyLock::new(|| {
            format!(
                "INSERT OR REPLACE INTO records ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21)"
            )
        });
        let mut stmt = tx
            .prepare_cached(&UPSERT)
            .map_err(|e| self.err("writing a record", e))?;
        stmt.execute(rusqlite::params![
            r.key.namespace,
            r.key.key.0.as_slice(),
            r.policy_digest,
            r.fingerprint.0.as_slice(),
            r.partition,
            r.state.as_str(),
            int(r.fence, "fence")?,
            int(r.lease_until_ms, "lease_until")?,
            i64::from(r.attempts),
            int(r.created_ms, "created")?,
            int(r.updated_ms, "updated")?,
            int(r.retention_ms, "retention")?,
            int(r.retain_until_ms, "retain_until")?,
            outcome.map(|o| o.status),
            outcome.map(|o| o.body.as_slice()),
            outcome.and_then(|o| o.error.as_deref()),
            r.holder.run_id,
            r.holder.trigger,
            r.holder.attempt,
            r.holder.host,
            i64::from(r.holder.pid),
        ])
        .map_err(|e| self.err("writing a record", e))?;
        Ok(())
    }

    /// The next fence, in the caller's transaction: a store-wide sequence
    /// that survives gc (records are deleted, the sequence row is not).
    fn next_fence(&self, tx: &Connection) -> Result<u64, StoreError> {
        let fence: i64 = tx
            .prepare_cached("UPDATE fence_seq SET last = last + 1 WHERE id = 1 RETURNING last")
            .and_then(|mut stmt| stmt.query_row([], |row| row.get(0)))
            .map_err(|e| self.err("issuing a fence", e))?;
        u64::try_from(fence).map_err(|_| self.corrupt(format!("the fence sequence is at {fence}")))
    }

    /// A group's epoch and members.
    fn load_membership(
        &self,
        tx: &Connection,
        group: &str,
    ) -> Result<Option<(u64, Vec<String>)>, StoreError> {
        let row: Option<(i64, String)> = tx
            .query_row(
                "SELECT epoch, members FROM memberships WHERE grp = ?1",
                [group],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .optional()
            .map_err(|e| self.err("reading a membership", e))?;
        row.map(|(epoch, members)| {
            let epoch = u64::try_from(epoch)
                .map_err(|_| self.corrupt(format!("group {group} has epoch {epoch}")))?;
            Ok((epoch, machine::split_members(&members)))
        })
        .transpose()
    }

    /// Refuses a stale ownership token, inside the caller's transaction (so
    /// that a membership change is ordered before or after the claim, never
    /// in between).
    fn check_epoch(
        &self,
        tx: &Connection,
        token: Option<&OwnershipToken>,
    ) -> Result<(), StoreError> {
        let Some(t) = token else { return Ok(()) };
        let current = self.load_membership(tx, &t.group)?.map(|(epoch, _)| epoch);
        machine::check_epoch(token, current)
    }

    fn load_job(&self, tx: &Connection, job: &str) -> Result<Option<JobLease>, StoreError> {
        let row: Option<(String, i64, i64)> = tx
            .query_row(
                "SELECT holder, fence, lease_until FROM job_leases WHERE job = ?1",
                [job],
                |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
            )
            .optional()
            .map_err(|e| self.err("reading a job lease", e))?;
        row.map(|(holder, fence, until)| {
            let unsigned = |v: i64, what: &str| {
                u64::try_from(v)
                    .map_err(|_| self.corrupt(format!("job lease {job}: {what} is {v}")))
            };
            Ok(JobLease {
                job: job.to_string(),
                holder,
                fence: unsigned(fence, "fence")?,
                lease_until_ms: unsigned(until, "lease_until")?,
            })
        })
        .transpose()
    }

    fn save_job(&self, tx: &Connection, lease: &JobLease) -> Result<(), StoreError> {
        tx.execute(
            "INSERT OR REPLACE INTO job_leases (job, holder, fence, lease_until) VALUES (?1, ?2, ?3, ?4)",
            rusqlite::params![
                lease.job,
                lease.holder,
                now_param(lease.fence),
                now_param(lease.lease_until_ms)
            ],
        )
        .map_err(|e| self.err("writing a job lease", e))?;
        Ok(())
    }

    fn decode(&self, raw: Raw) -> Result<Record, StoreError> {
        let digest = |bytes: Vec<u8>, what: &str| {
            <[u8; 32]>::try_from(bytes.as_slice())
                .map(Digest)
                .map_err(|_| self.corrupt(format!("{what} is {} bytes, not 32", bytes.len())))
        };
        let unsigned = |v: i64, what: &str| {
            u64::try_from(v).map_err(|_| self.corrupt(format!("{what} is {v}")))
        };
        let small = |v: i64, what: &str| {
            u32::try_from(v).map_err(|_| self.corrupt(format!("{what} is {v}")))
        };
        let key = RecordKey {
            namespace: raw.namespace,
            key: digest(raw.key, "key")?,
        };
        let state: RecordState = raw
            .state
            .parse()
            .map_err(|e: String| self.corrupt(format!("record {key}: {e}")))?;
        let outcome = match raw.outcome_status {
            None => None,
            Some(status) => Some(Outcome {
                status: i32::try_from(status)
                    .map_err(|_| self.corrupt(format!("outcome status is {status}")))?,
                body: raw.outcome_body.unwrap_or_default(),
                error: raw.outcome_error,
            }),
        };
        Ok(Record {
            policy_digest: raw.policy_digest,
            fingerprint: digest(raw.fingerprint, "fingerprint")?,
            partition: raw.partition,
            state,
            fence: unsigned(raw.fence, "fence")?,
            lease_until_ms: unsigned(raw.lease_until, "lease_until")?,
            attempts: small(raw.attempts, "attempts")?,
            created_ms: unsigned(raw.created, "created")?,
            updated_ms: unsigned(raw.updated, "updated")?,
            retention_ms: unsigned(raw.retention_ms, "retention_ms")?,
            retain_until_ms: unsigned(raw.retain_until, "retain_until")?,
            outcome,
            holder: Holder {
                run_id: raw.run_id,
                trigger: raw.trigger,
                attempt: raw
                    .attempt
                    .map(|a| small(a, "holder attempt"))
                    .transpose()?,
                host: raw.host,
                pid: small(raw.pid, "holder pid")?,
            },
            key,
        })
    }
}

/// A row as SQLite types, decoded into a [`Record`] with typed errors.
struct Raw {
    namespace: String,
    key: Vec<u8>,
    policy_digest: String,
    fingerprint: Vec<u8>,
    partition: String,
    state: String,
    fence: i64,
    lease_until: i64,
    attempts: i64,
    created: i64,
    updated: i64,
    retention_ms: i64,
    retain_until: i64,
    outcome_status: Option<i64>,
    outcome_body: Option<Vec<u8>>,
    outcome_error: Option<String>,
    run_id: Option<String>,
    trigger: Option<String>,
    attempt: Option<i64>,
    host: String,
    pid: i64,
}

impl Raw {
    fn from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Raw> {
        Ok(Raw {
            namespace: row.get(0)?,
            key: row.get(1)?,
            policy_digest: row.get(2)?,
            fingerprint: row.get(3)?,
            partition: row.get(4)?,
            state: row.get(5)?,
            fence: row.get(6)?,
            lease_until: row.get(7)?,
            attempts: row.get(8)?,
            created: row.get(9)?,
            updated: row.get(10)?,
            retention_ms: row.get(11)?,
            retain_until: row.get(12)?,
            outcome_status: row.get(13)?,
            outcome_body: row.get(14)?,
            outcome_error: row.get(15)?,
            run_id: row.get(16)?,
            trigger: row.get(17)?,
            attempt: row.get(18)?,
            host: row.get(19)?,
            pid: row.get(20)?,
        })
    }
}

/// SQL for "counts as absent" (see `machine::is_expired`), `?1` = now.
const EXPIRED: &str = "(retain_until < ?1 AND NOT (state = 'in-progress' AND lease_until > ?1))";

fn now_param(now: u64) -> i64 {
    // The clock is clamped far below i64::MAX in practice; saturate anyway.
    i64::try_from(now).unwrap_or(i64::MAX)
}

#[async_trait]
impl Store for SqliteStore {
    fn describe(&self) -> String {
        self.inner.name.clone()
    }

    fn clock(&self) -> &crate::StoreClock {
        &self.inner.options.clock
    }

    async fn claim(&self, request: ClaimRequest) -> Result<ClaimOutcome, StoreError> {
        machine::validate(&request)?;
        self.blocking(move |inner| {
            inner.write("claiming", |tx, now| {
                inner.check_epoch(tx, request.ownership.as_ref())?;
                match machine::claim(inner.load(tx, &request.key)?, &request, now) {
                    ClaimStep::Existing(existing) => Ok(ClaimOutcome::Existing(existing)),
                    ClaimStep::Insert => {
                        let fence = inner.next_fence(tx)?;
                        let record = machine::new_record(&request, fence, now);
                        inner.save(tx, &record)?;
                        Ok(ClaimOutcome::Claimed(machine::claim_of(&record)))
                    }
                }
            })
        })
        .await
    }

    /// One write transaction for the whole batch: one commit (one fsync
    /// under `synchronous=full`) instead of one per claim. A request the
    /// store refuses (invalid, stale epoch) is refused alone; a failure of
    /// the transaction itself fails the batch, and then no claim was made.
    async fn claim_many(
        &self,
        requests: Vec<ClaimRequest>,
    ) -> Result<Vec<Result<ClaimOutcome, StoreError>>, StoreError> {
        self.blocking(move |inner| {
            inner.write("claiming a batch", |tx, now| {
                let mut outcomes = Vec::with_capacity(requests.len());
                for request in requests {
                    let claimed = machine::validate(&request)
                        .and_then(|()| inner.check_epoch(tx, request.ownership.as_ref()));
                    let outcome = match claimed {
                        Err(
                            refused @ (StoreError::InvalidRequest(_)
                            | StoreError::StaleEpoch { .. }),
                        ) => Err(refused),
                        Err(failed) => return Err(failed),
                        Ok(()) => Ok(
                            match machine::claim(inner.load(tx, &request.key)?, &request, now) {
                                ClaimStep::Existing(existing) => ClaimOutcome::Existing(existing),
                                ClaimStep::Insert => {
                                    let fence = inner.next_fence(tx)?;
                                    let record = machine::new_record(&request, fence, now);
                                    inner.save(tx, &record)?;
                                    ClaimOutcome::Claimed(machine::claim_of(&record))
                                }
                            },
                        ),
                    };
                    outcomes.push(outcome);
                }
                Ok(outcomes)
            })
        })
        .await
    }

    async fn take_over_with(
        &self,
        key: &RecordKey,
        observed_fence: u64,
        lease: Duration,
        holder: Holder,
        ownership: Option<&OwnershipToken>,
    ) -> Result<Claim, StoreError> {
        let key = key.clone();
        let ownership = ownership.cloned();
        self.blocking(move |inner| {
            inner.write("taking over", |tx, now| {
                inner.check_epoch(tx, ownership.as_ref())?;
                let record =
                    machine::take_over_check(inner.load(tx, &key)?, &key, observed_fence, now)?;
                let fence = inner.next_fence(tx)?;
                let record = machine::taken_over(record, fence, lease, holder, now);
                inner.save(tx, &record)?;
                Ok(machine::claim_of(&record))
            })
        })
        .await
    }

    async fn mark_unknown(&self, key: &RecordKey, observed_fence: u64) -> Result<(), StoreError> {
        let key = key.clone();
        self.blocking(move |inner| {
            inner.write("marking outcome-unknown", |tx, now| {
                if let Some(record) =
                    machine::mark_unknown(inner.load(tx, &key)?, &key, observed_fence, now)?
                {
                    inner.save(tx, &record)?;
                }
                Ok(())
            })
        })
        .await
    }

    async fn complete(
        &self,
        key: &RecordKey,
        fence: u64,
        outcome: Outcome,
    ) -> Result<(), StoreError> {
        self.finish(key, fence, RecordState::Completed, outcome)
            .await
    }

    async fn fail(
        &self,
        key: &RecordKey,
        fence: u64,
        retryable: bool,
        outcome: Outcome,
    ) -> Result<(), StoreError> {
        let state = machine::failed_state(retryable);
        self.finish(key, fence, state, outcome).await
    }

    async fn finish_many(
        &self,
        finishes: Vec<Finish>,
    ) -> Result<Vec<Result<(), StoreError>>, StoreError> {
        self.blocking(move |inner| {
            let limit = inner.options.max_outcome_bytes;
            inner.write("finishing a batch", |tx, now| {
                let mut results = Vec::with_capacity(finishes.len());
                for f in finishes {
                    // A refusal is this holder's answer; a failure to read
                    // or write fails the batch (and rolls it back).
                    let current = inner.load(tx, &f.key)?;
                    results.push(
                        match machine::finish(
                            current,
                            &f.key,
                            f.fence,
                            f.ending.state(),
                            f.outcome,
                            limit,
                            now,
                        ) {
                            Ok(record) => {
                                inner.save(tx, &record)?;
                                Ok(())
                            }
                            Err(refused) => Err(refused),
                        },
                    );
                }
                Ok(results)
            })
        })
        .await
    }

    async fn heartbeat(
        &self,
        key: &RecordKey,
        fence: u64,
        lease: Duration,
    ) -> Result<u64, StoreError> {
        let key = key.clone();
        self.blocking(move |inner| {
            inner.write("heartbeating", |tx, now| {
                let record = machine::heartbeat(inner.load(tx, &key)?, &key, fence, lease, now)?;
                inner.save(tx, &record)?;
                Ok(record.lease_until_ms)
            })
        })
        .await
    }

    async fn get(&self, key: &RecordKey) -> Result<Option<RecordView>, StoreError> {
        let key = key.clone();
        self.blocking(move |inner| {
            // One SELECT is its own consistent snapshot; no lock needed.
            let conn = inner.conn();
            let now = inner.options.clock.now_ms();
            Ok(machine::live(inner.load(&conn, &key)?, now).map(|r| RecordView::at(r, now)))
        })
        .await
    }

    async fn list(&self, filter: ListFilter) -> Result<Vec<RecordView>, StoreError> {
        self.blocking(move |inner| {
            let conn = inner.conn();
            let now = inner.options.clock.now_ms();
            let sql = format!(
                "SELECT {COLUMNS} FROM records WHERE NOT {EXPIRED} \
                 AND (?2 IS NULL OR namespace = ?2) AND (?3 IS NULL OR partition = ?3) AND (?4 IS NULL OR state = ?4) \
                 ORDER BY updated DESC, namespace, key LIMIT ?5"
            );
            let mut stmt = conn.prepare(&sql).map_err(|e| inner.err("listing records", e))?;
            let limit = filter.limit.map_or(-1, i64::from);
            let rows = stmt
                .query_map(
                    rusqlite::params![
                        now_param(now),
                        filter.namespace,
                        filter.partition,
                        filter.state.map(RecordState::as_str),
                        limit
                    ],
                    Raw::from_row,
                )
                .map_err(|e| inner.err("listing records", e))?;
            let mut out = Vec::new();
            for raw in rows {
                let raw = raw.map_err(|e| inner.err("listing records", e))?;
                out.push(RecordView::at(inner.decode(raw)?, now));
            }
            Ok(out)
        })
        .await
    }

    async fn gc(&self) -> Result<u64, StoreError> {
        self.blocking(|inner| {
            inner.write("collecting garbage", |tx, now| {
                let removed = tx
                    .execute(
                        &format!("DELETE FROM records WHERE {EXPIRED}"),
                        [now_param(now)],
                    )
                    .map_err(|e| inner.err("collecting garbage", e))?;
                Ok(removed as u64)
            })
        })
        .await
    }

    async fn join_membership(
        &self,
        group: &str,
        members: &[String],
    ) -> Result<Membership, StoreError> {
        let members = machine::normalize_members(group, members)?;
        let group = group.to_string();
        self.blocking(move |inner| {
            inner.write("joining a membership", |tx, now| {
                let stored = inner.load_membership(tx, &group)?;
                if let Some((epoch, stored)) = &stored
                    && !machine::membership_changes(Some(stored), &members)
                {
                    return Ok(Membership {
                        group,
                        epoch: *epoch,
                        members,
                    });
                }
                // The new epoch and the new members commit together.
                let epoch: i64 = tx
                    .query_row(
                        "UPDATE epoch_seq SET last = last + 1 WHERE id = 1 RETURNING last",
                        [],
                        |row| row.get(0),
                    )
                    .map_err(|e| inner.err("issuing an epoch", e))?;
                tx.execute(
                    "INSERT OR REPLACE INTO memberships (grp, epoch, members, updated) VALUES (?1, ?2, ?3, ?4)",
                    rusqlite::params![group, epoch, members.join("\n"), now_param(now)],
                )
                .map_err(|e| inner.err("writing a membership", e))?;
                let epoch = u64::try_from(epoch)
                    .map_err(|_| inner.corrupt(format!("the epoch sequence is at {epoch}")))?;
                Ok(Membership {
                    group,
                    epoch,
                    members,
                })
            })
        })
        .await
    }

    async fn membership(&self, group: &str) -> Result<Option<Membership>, StoreError> {
        let group = group.to_string();
        self.blocking(move |inner| {
            let conn = inner.conn();
            Ok(inner
                .load_membership(&conn, &group)?
                .map(|(epoch, members)| Membership {
                    group,
                    epoch,
                    members,
                }))
        })
        .await
    }

    async fn acquire_job_lease(
        &self,
        job: &str,
        holder: &str,
        lease: Duration,
    ) -> Result<JobLeaseAcquire, StoreError> {
        machine::check_name("job", job)?;
        machine::check_name("job-lease holder", holder)?;
        let (job, holder) = (job.to_string(), holder.to_string());
        self.blocking(move |inner| {
            inner.write(
                "acquiring a job lease",
                |tx, now| match machine::acquire_job(inner.load_job(tx, &job)?, now) {
                    JobStep::Held(current, remaining_ms) => Ok(JobLeaseAcquire::Held {
                        current,
                        remaining_ms,
                    }),
                    JobStep::Take => {
                        let taken = JobLease {
                            fence: inner.next_fence(tx)?,
                            lease_until_ms: machine::after(now, lease),
                            job,
                            holder,
                        };
                        inner.save_job(tx, &taken)?;
                        Ok(JobLeaseAcquire::Acquired(taken))
                    }
                },
            )
        })
        .await
    }

    async fn heartbeat_job_lease(
        &self,
        job: &str,
        fence: u64,
        lease: Duration,
    ) -> Result<u64, StoreError> {
        let job = job.to_string();
        self.blocking(move |inner| {
            inner.write("heartbeating a job lease", |tx, now| {
                let mut held = machine::job_held(inner.load_job(tx, &job)?, &job, fence)?;
                held.lease_until_ms = machine::after(now, lease);
                inner.save_job(tx, &held)?;
                Ok(held.lease_until_ms)
            })
        })
        .await
    }

    async fn release_job_lease(&self, job: &str, fence: u64) -> Result<(), StoreError> {
        let job = job.to_string();
        self.blocking(move |inner| {
            inner.write("releasing a job lease", |tx, _now| {
                machine::job_held(inner.load_job(tx, &job)?, &job, fence)?;
                tx.execute("DELETE FROM job_leases WHERE job = ?1", [&job])
                    .map_err(|e| inner.err("releasing a job lease", e))?;
                Ok(())
            })
        })
        .await
    }
}

impl SqliteStore {
    async fn finish(
        &self,
        key: &RecordKey,
        fence: u64,
        state: RecordState,
        outcome: Outcome,
    ) -> Result<(), StoreError> {
        let key = key.clone();
        self.blocking(move |inner| {
            let limit = inner.options.max_outcome_bytes;
            inner.write("finishing an attempt", |tx, now| {
                let record = machine::finish(
                    inner.load(tx, &key)?,
                    &key,
                    fence,
                    state,
                    outcome,
                    limit,
                    now,
                )?;
                inner.save(tx, &record)
            })
        })
        .await
    }
}
