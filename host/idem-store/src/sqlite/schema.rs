//! Identifying and migrating a store file: the application id, the schema
//! version (`PRAGMA user_version`) and the migrations of
//! `migrations/sqlite/`, applied in one immediate transaction.

use std::path::Path;
use std::time::Duration;

use rusqlite::{Connection, ErrorCode};

use crate::migrations;
use crate::vocabulary::{OpenErrorKind, StoreError};

/// The newest schema version this build knows: 1 records and fences; 2
/// memberships with their epochs, and job leases.
pub const SCHEMA_VERSION: i64 = migrations::SQLITE.len() as i64;

/// `PRAGMA application_id` of an idem store: "idem" in ASCII.
const APPLICATION_ID: i64 = 0x6964_656d;

/// Puts the file in WAL mode (a no-op when it already is), returning the
/// journal mode SQLite settled on.
///
/// Changing the journal mode needs an exclusive lock and SQLite does not run
/// the busy handler for it: when several processes open a new file at once,
/// all but one get `SQLITE_BUSY`. So retry, within the busy timeout.
pub(super) fn switch_to_wal(conn: &Connection, busy_timeout: Duration) -> rusqlite::Result<String> {
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
pub(super) fn identify(conn: &Connection, path: &Path) -> Result<i64, StoreError> {
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
pub(super) fn migrate(conn: &Connection, path: &Path) -> Result<(), StoreError> {
    conn.execute_batch("BEGIN IMMEDIATE")
        .map_err(|e| open_error(path, "locking for the migration", e))?;
    let result = (|| {
        let found = identify(conn, path)?;
        for (from, migration) in migrations::SQLITE
            .iter()
            .enumerate()
            .skip(usize::try_from(found).unwrap_or(usize::MAX))
        {
            conn.execute_batch(migration.sql)
                .map_err(|e| open_error(path, migration.name, e))?;
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
pub(super) fn open_error(path: &Path, context: &'static str, e: rusqlite::Error) -> StoreError {
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
                cause: std::sync::Arc::new(e),
            };
        }
    };
    StoreError::Open {
        path: path.to_path_buf(),
        kind,
        detail: format!("{context}: {e}"),
    }
}
