//! Opening a SQLite store, its one connection, and where its calls run: in
//! place on a multi-threaded runtime's worker (`block_in_place`), on the
//! blocking pool otherwise.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Mutex, MutexGuard};

use rusqlite::{Connection, ErrorCode, OpenFlags, Transaction, TransactionBehavior};

use super::{SqliteOptions, Synchronous, field_index, schema};
use crate::vocabulary::StoreOptions;
use crate::vocabulary::{OpenErrorKind, StoreError};

/// A store in a SQLite file. Cheap to clone (clones share the connection).
#[derive(Debug, Clone)]
pub struct SqliteStore {
    pub(super) inner: Arc<Inner>,
}

#[derive(Debug)]
pub(super) struct Inner {
    conn: Mutex<Connection>,
    /// `sqlite:PATH`, for messages.
    pub(super) name: String,
    pub(super) options: StoreOptions,
    /// The file the connection opened, and its device and inode then: a
    /// file removed or replaced at that path while open would otherwise
    /// take every later write into a file no one will read again.
    path: PathBuf,
    identity: Option<(u64, u64)>,
    /// How long a call waits for another connection's lock.
    busy_timeout: Duration,
    /// When the store was opened, and when a caller last asked for the
    /// connection (ms since then): the idle indexer (`field_index.rs`)
    /// runs only once the store has had no call for a while.
    opened: Instant,
    last_call_ms: AtomicU64,
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
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !options.migrate => {
                return Err(StoreError::NotMigrated {
                    store: format!("sqlite:{}", path.display()),
                    found: None,
                    wanted: schema::SCHEMA_VERSION,
                });
            }
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
        let conn = Connection::open_with_flags(path, flags)
            .map_err(|e| schema::open_error(path, "opening", e))?;
        // SQLite silently falls back to read-only when it may not write.
        if conn
            .is_readonly(rusqlite::MAIN_DB)
            .map_err(|e| schema::open_error(path, "opening", e))?
        {
            return Err(refuse(
                OpenErrorKind::ReadOnly,
                "the file is not writable".into(),
            ));
        }
        conn.busy_timeout(sqlite.busy_timeout)
            .map_err(|e| schema::open_error(path, "setting busy_timeout", e))?;

        // Read-only checks first: a foreign, corrupt or newer file is refused
        // before the switch to WAL (which writes the header). One read
        // transaction, so that the checks see one snapshot even while
        // another process is creating the schema.
        conn.execute_batch("BEGIN DEFERRED")
            .map_err(|e| schema::open_error(path, "reading the header", e))?;
        let checked = schema::identify(&conn, path);
        // Ending a read transaction cannot lose anything.
        let _ = conn.execute_batch("COMMIT");
        let found = checked?;
        if !options.migrate && found < schema::SCHEMA_VERSION {
            // Before the switch to WAL, which would write the header.
            // The file exists (a missing one was refused above): an empty
            // one holds no schema yet, which is not "does not exist".
            return Err(StoreError::NotMigrated {
                store: format!("sqlite:{}", path.display()),
                found: Some(found),
                wanted: schema::SCHEMA_VERSION,
            });
        }

        let mode = schema::switch_to_wal(&conn, sqlite.busy_timeout)
            .map_err(|e| schema::open_error(path, "switching to WAL", e))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(refuse(
                OpenErrorKind::Unreadable,
                format!("SQLite refused WAL mode (journal_mode is {mode})"),
            ));
        }
        conn.pragma_update(None, "synchronous", sqlite.synchronous.pragma())
            .map_err(|e| schema::open_error(path, "setting synchronous", e))?;
        // SQLite's default page cache is 2 MiB: past a few hundred thousand
        // records the key index no longer fits, and every claim reads its
        // random leaf pages back through the kernel, which multiplies a
        // claim's latency (see `docs/benchmarks.md`). 64 MiB holds the
        // inner pages of tens of millions.
        conn.pragma_update(None, "cache_size", -64 * 1024)
            .map_err(|e| schema::open_error(path, "setting cache_size", e))?;
        conn.pragma_update(None, "wal_autocheckpoint", sqlite.wal_autocheckpoint)
            .map_err(|e| schema::open_error(path, "setting wal_autocheckpoint", e))?;
        if found < schema::SCHEMA_VERSION {
            schema::migrate(&conn, path)?;
        }
        let name = format!("sqlite:{}", path.display());
        let identity = std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()));
        let inner = Arc::new(Inner {
            conn: Mutex::new(conn),
            name,
            options,
            path: path.to_path_buf(),
            identity,
            busy_timeout: sqlite.busy_timeout,
            opened: Instant::now(),
            last_call_ms: AtomicU64::new(0),
        });
        field_index::spawn_indexer(Arc::downgrade(&inner));
        Ok(SqliteStore { inner })
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

    /// Runs `f` where a blocking call may run: in place on a multi-threaded
    /// runtime (`block_in_place`), on the blocking pool on a
    /// current-thread one.
    pub(super) async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Inner) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let inner = self.inner.clone();
        // On a multi-threaded runtime the call runs right here, with the
        // worker marked as blocking: a SQLite call is short, and handing it
        // to the blocking pool and back (two thread switches) would cost
        // more than the call itself. A current-thread runtime cannot block in
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

impl Inner {
    fn conn(&self) -> MutexGuard<'_, Connection> {
        // Before the lock: a caller waiting for it stops the idle indexer
        // after its current batch.
        self.last_call_ms
            .store(self.elapsed_ms(), Ordering::Relaxed);
        // A panic mid-call unwinds through the `Transaction`, which rolls
        // back: the connection is clean (parking_lot's lock is not poisoned).
        self.conn.lock()
    }

    fn elapsed_ms(&self) -> u64 {
        u64::try_from(self.opened.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// How long since a caller last asked for the connection (the idle
    /// indexer's own turns do not count).
    pub(super) fn since_last_call(&self) -> Duration {
        let last = self.last_call_ms.load(Ordering::Relaxed);
        Duration::from_millis(self.elapsed_ms().saturating_sub(last))
    }

    /// The connection for a read by the idle indexer, which does not count
    /// as a call.
    pub(super) fn peek<T>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        self.check_file("reading")?;
        let conn = self.conn.lock();
        let out = f(&conn);
        MutexGuard::unlock_fair(conn);
        out
    }

    pub(super) fn err(&self, context: &'static str, e: rusqlite::Error) -> StoreError {
        match e.sqlite_error_code() {
            Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => StoreError::Busy {
                store: self.name.clone(),
                context,
            },
            _ => StoreError::Backend {
                store: self.name.clone(),
                context,
                cause: std::sync::Arc::new(e),
            },
        }
    }

    pub(super) fn corrupt(&self, what: String) -> StoreError {
        StoreError::Corrupt {
            store: self.name.clone(),
            what,
        }
    }

    /// Refuses to go on when the file at the store's path is no longer
    /// the one the connection opened (removed, or replaced by a rename):
    /// what it wrote would be lost with the old file, and what it read would
    /// not be the store's. The error is a backend failure, which a job
    /// waits out: put the file back and the run goes on, nothing written
    /// meanwhile. (A file overwritten in place keeps its inode and cannot
    /// be told apart here; SQLite's own checks see what it can.)
    fn check_file(&self, context: &'static str) -> Result<(), StoreError> {
        let Some(opened) = self.identity else {
            return Ok(());
        };
        let now = match std::fs::metadata(&self.path) {
            Ok(m) if (m.dev(), m.ino()) == opened => return Ok(()),
            Ok(m) => format!("another file (inode {}) is there now", m.ino()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => "it is gone".to_string(),
            Err(e) => format!("it cannot be read: {e}"),
        };
        let why = format!(
            "the store file {} was removed or replaced while idem had it open (inode {}; {now}); \
             nothing is read or written until that file is back at its path",
            self.path.display(),
            opened.1
        );
        Err(StoreError::Backend {
            store: self.name.clone(),
            context,
            cause: crate::vocabulary::cause(why),
        })
    }

    /// One write transaction: `BEGIN IMMEDIATE`, the store clock read under
    /// the lock, `f`, commit. An error from `f` rolls back: nothing changes.
    pub(super) fn write<T>(
        &self,
        context: &'static str,
        f: impl FnOnce(&Transaction<'_>, u64) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        self.check_file(context)?;
        let mut conn = self.conn();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| self.err(context, e))?;
        let now = self.options.clock.now_ms();
        let out = f(&tx, now)?;
        tx.commit().map_err(|e| self.err(context, e))?;
        // Handed straight to a thread already waiting, if any: a caller
        // writing in a loop (gc's batches, a busy group-commit lane) would
        // otherwise take the connection back before a waiting claim wakes,
        // and starve it for whole runs of batches.
        MutexGuard::unlock_fair(conn);
        Ok(out)
    }

    /// [`Inner::write`] only if SQLite's write lock is free now: `None`,
    /// and nothing done, when another connection holds it. For work that
    /// may wait for a later turn (the lookup index's), so that this
    /// store's own callers never wait behind a lock it waits for.
    pub(super) fn write_if_free<T>(
        &self,
        context: &'static str,
        f: impl FnOnce(&Transaction<'_>, u64) -> Result<T, StoreError>,
    ) -> Result<Option<T>, StoreError> {
        self.check_file(context)?;
        let mut conn = self.conn.lock();
        conn.busy_timeout(Duration::ZERO)
            .map_err(|e| self.err(context, e))?;
        let out = (|| {
            let tx = match conn.transaction_with_behavior(TransactionBehavior::Immediate) {
                Ok(tx) => tx,
                // Taken: not this turn.
                Err(e) if e.sqlite_error_code() == Some(ErrorCode::DatabaseBusy) => {
                    return Ok(None);
                }
                Err(e) => return Err(self.err(context, e)),
            };
            // Once held, the lock is not waited for again in this
            // transaction; the timeout goes back before anything runs.
            tx.busy_timeout(self.busy_timeout)
                .map_err(|e| self.err(context, e))?;
            let now = self.options.clock.now_ms();
            let out = f(&tx, now)?;
            tx.commit().map_err(|e| self.err(context, e))?;
            Ok(Some(out))
        })();
        // Again whatever happened (a no-op when it already is).
        conn.busy_timeout(self.busy_timeout)
            .map_err(|e| self.err(context, e))?;
        MutexGuard::unlock_fair(conn);
        out
    }

    /// The connection itself, for a transaction its caller runs (an
    /// effect in the store's transaction, `in_tx.rs`): the same file check
    /// and fair hand-over as [`Inner::write`].
    pub(super) fn with_connection<T>(
        &self,
        context: &'static str,
        f: impl FnOnce(&mut Connection) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        self.check_file(context)?;
        let mut conn = self.conn();
        let out = f(&mut conn);
        MutexGuard::unlock_fair(conn);
        out
    }

    /// Copies the write-ahead log back into the database file as far as
    /// readers allow (`wal_checkpoint(PASSIVE)`), between transactions.
    pub(super) fn checkpoint(&self) -> Result<(), StoreError> {
        let conn = self.conn();
        conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()))
            .map_err(|e| self.err("checkpointing the log", e))?;
        MutexGuard::unlock_fair(conn);
        Ok(())
    }

    /// A read outside a write transaction (one statement is its own
    /// snapshot): the connection and the store clock.
    pub(super) fn read<T>(
        &self,
        f: impl FnOnce(&Connection, u64) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        self.check_file("reading")?;
        let conn = self.conn();
        let now = self.options.clock.now_ms();
        f(&conn, now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The URL's `wal_autocheckpoint` reaches the connection; SQLite's own
    /// default otherwise.
    #[test]
    fn the_checkpoint_interval_is_the_connections() {
        let dir = tempfile::tempdir().expect("temp dir");
        let interval = |sqlite: SqliteOptions, file: &str| -> i64 {
            let store = SqliteStore::open(&dir.path().join(file), sqlite, StoreOptions::default())
                .expect("open");
            store
                .inner
                .conn()
                .pragma_query_value(None, "wal_autocheckpoint", |row| row.get(0))
                .expect("pragma")
        };
        assert_eq!(interval(SqliteOptions::default(), "a.db"), 1_000);
        let larger = SqliteOptions {
            wal_autocheckpoint: 10_000,
            ..SqliteOptions::default()
        };
        assert_eq!(interval(larger, "b.db"), 10_000);
    }
}
