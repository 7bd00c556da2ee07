//! The lookup index on SQLite, written behind the claims: `record_fields`
//! (migration 10), one row per field of each record's kept operation —
//! (name, value, rowid) — and `record_fields_mark.indexed`, the rowid up
//! to which every record is in it. A lookup by field (`idem inspect
//! --field invoice_id=R-189`, the console's search) reads the index for the
//! records up to the mark and scans only the records after it.
//!
//! Why behind and not in the claim's commit: written there, the index cost
//! each claim about five random index pages, and made loading in batches
//! 4.5× slower (`docs/benchmarks.md`, "the lookup index"), where a commit
//! is kept to about 2.6 page writes an operation. So no claim writes it.
//! The indexer reads the records after the mark in rowid order (records
//! are stored in claim order, migration 6), writes their fields and moves
//! the mark, in one transaction per batch; it runs
//!
//! - while the store is idle: a thread per open store wakes every
//!   [`TICK`], and indexes batch after batch while no call of this
//!   process has taken the connection for [`IDLE`] and no other
//!   connection committed since its last look (`PRAGMA data_version`),
//!   taking SQLite's write lock only if it is free (a claim waits for one
//!   batch at most, never for a lock the indexer waits on);
//! - on a lookup, up to [`LOOKUP_CATCH_UP`] records before it reads;
//! - on gc (`Records::gc`), to the end.
//!
//! What keeps the answers exact (the index only narrows; the host's
//! `ListFilter::keeps` decides): every record up to the mark has all its
//! fields in the index under its rowid, and every record after it is
//! scanned. Three writes could break that, and each keeps it:
//!
//! - a new record's rowid is one more than the largest in the table, so it
//!   lands after the mark, unless gc removed the largest ones: gc lowers
//!   the mark to the largest rowid left, in its own transaction;
//! - a record replaced in place under its key (an expired one claimed
//!   again) keeps its rowid: when its operation changes, its rows are
//!   rewritten in that transaction ([`Inner::reindex`]), which is rare and
//!   never a first claim;
//! - gc removes a record's rows with it ([`Inner::unindex`]).
//!
//! Rowids are stable: idem never runs `VACUUM` (whose copy keeps them in
//! the SQLite bundled here, but which SQLite does not promise to keep for
//! a table without an `INTEGER PRIMARY KEY`).
//!
//! The rows are made by SQLite's own JSON reader (`json_each`) from the
//! column's text, so a value is stored as SQLite reads it: text for a JSON
//! string, an integer or real for a number, 1 or 0 for a boolean. A lookup
//! asks for the value both as text and as JSON (`150` as the text "150"
//! and the number 150).

use std::sync::Weak;
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension};

use super::connection::Inner;
use crate::vocabulary::{RecordKey, StoreError};

/// Records one transaction of the idle indexer reads: a claim that
/// arrives meanwhile waits for about this many records' rows (a few tens
/// of ms on a large store whose index pages are not cached).
pub(super) const INDEX_BATCH: u32 = 256;

/// Records a lookup indexes before it reads, at most: enough that a store
/// written since the indexer last ran is read through the index, few
/// enough that a lookup after a long busy spell is not held by it (the
/// rest is scanned).
pub(super) const LOOKUP_CATCH_UP: u32 = 1_024;

/// How often the idle indexer looks.
const TICK: Duration = Duration::from_millis(250);

/// How long no call of this process must have taken the connection for
/// the store to count as idle.
pub(super) const IDLE: Duration = Duration::from_secs(1);

/// The fields of the operation `?1` (its JSON text), as `json_each` rows
/// (`key`, `value`). Text that is not a JSON object with a `fields` object
/// (which the host never keeps, but a library caller may pass) gives none
/// rather than failing.
const FIELDS_OF: &str = "json_each(CASE WHEN json_valid(?1) AND json_type(?1, '$.fields') = 'object' \
     THEN ?1 ELSE '{\"fields\":{}}' END, '$.fields') f";

/// The records a lookup by field reads, by rowid (`rec`): those up to the
/// mark through the index (`?6` the name, `?7` the value as text, `?8` as
/// JSON or NULL), those after it scanned for the value's text (`?9`). Both
/// halves read the mark in the same statement, so they meet exactly.
pub(super) const LOOKUP: &str = "SELECT rec FROM record_fields WHERE name = ?6 \
     AND value IN (?7, json_extract(?8, '$')) \
     AND rec <= (SELECT indexed FROM record_fields_mark WHERE id = 1) \
     UNION SELECT rowid FROM records \
     WHERE rowid > (SELECT indexed FROM record_fields_mark WHERE id = 1) AND instr(operation, ?9) > 0";

/// Starts the idle indexer of a store: a thread that holds the store only
/// while it indexes, and ends once the store is dropped.
pub(super) fn spawn_indexer(store: Weak<Inner>) {
    let spawned = std::thread::Builder::new()
        .name("idem-sqlite-index".into())
        .spawn(move || {
            let mut seen = None;
            loop {
                std::thread::sleep(TICK);
                let Some(inner) = store.upgrade() else { return };
                // A failure here is met again by the store's own calls,
                // which report it; lookups meanwhile scan what is behind.
                let _ = inner.index_while_idle(&mut seen);
            }
        });
    // A thread that cannot start leaves the index to lookups and gc.
    drop(spawned);
}

impl Inner {
    /// Indexes up to `limit` records after the mark and not past `upto`,
    /// in rowid order, and moves the mark past them, in the caller's
    /// write transaction; how many records it read.
    pub(super) fn index_batch(
        &self,
        tx: &Connection,
        limit: u32,
        upto: i64,
    ) -> Result<u64, StoreError> {
        let fail = |e| self.err("indexing records' fields", e);
        let mark = self.mark(tx)?;
        let (count, last): (i64, Option<i64>) = tx
            .prepare_cached(
                "SELECT count(*), max(rowid) FROM \
                 (SELECT rowid FROM records WHERE rowid > ?1 AND rowid <= ?3 ORDER BY rowid LIMIT ?2)",
            )
            .and_then(|mut s| {
                s.query_row(rusqlite::params![mark, i64::from(limit), upto], |row| {
                    Ok((row.get(0)?, row.get(1)?))
                })
            })
            .map_err(fail)?;
        let Some(last) = last else { return Ok(0) };
        tx.prepare_cached(
            "INSERT OR IGNORE INTO record_fields (name, value, rec) \
             SELECT f.key, f.value, r.rowid FROM records r, \
             json_each(CASE WHEN json_valid(r.operation) AND json_type(r.operation, '$.fields') = 'object' \
             THEN r.operation ELSE '{\"fields\":{}}' END, '$.fields') f \
             WHERE r.rowid > ?1 AND r.rowid <= ?2 AND r.operation LIKE '{%' AND f.value IS NOT NULL",
        )
        .and_then(|mut s| s.execute([mark, last]))
        .map_err(fail)?;
        tx.prepare_cached("UPDATE record_fields_mark SET indexed = ?1 WHERE id = 1")
            .and_then(|mut s| s.execute([last]))
            .map_err(fail)?;
        Ok(u64::try_from(count).unwrap_or(0))
    }

    /// The mark: every record with a rowid up to it is in the index.
    fn mark(&self, conn: &Connection) -> Result<i64, StoreError> {
        conn.prepare_cached("SELECT indexed FROM record_fields_mark WHERE id = 1")
            .and_then(|mut s| s.query_row([], |row| row.get(0)))
            .map_err(|e| self.err("reading the lookup index's mark", e))
    }

    /// Whether records after the mark and not past `upto` wait to be
    /// indexed (a read).
    fn behind(&self, conn: &Connection, upto: i64) -> Result<bool, StoreError> {
        conn.prepare_cached(
            "SELECT EXISTS (SELECT 1 FROM records WHERE rowid > \
             (SELECT indexed FROM record_fields_mark WHERE id = 1) AND rowid <= ?1)",
        )
        .and_then(|mut s| s.query_row([upto], |row| row.get(0)))
        .map_err(|e| self.err("reading the lookup index's mark", e))
    }

    /// The largest rowid there is now (0 with no record): what the index
    /// must reach to cover every record written so far.
    pub(super) fn index_end(&self) -> Result<i64, StoreError> {
        self.peek(|conn| {
            conn.prepare_cached("SELECT coalesce(max(rowid), 0) FROM records")
                .and_then(|mut s| s.query_row([], |row| row.get(0)))
                .map_err(|e| self.err("reading the newest record's place", e))
        })
    }

    /// Indexes up to `limit` records, none past `upto`, in one
    /// transaction, when any wait; how many. With `wait` false it takes SQLite's write lock only if it
    /// is free (0 otherwise: another connection is writing, and the lookup
    /// or the idle indexer does not wait for it).
    pub(super) fn catch_up(&self, limit: u32, wait: bool, upto: i64) -> Result<u64, StoreError> {
        // Not a call of this process's callers: the idle indexer's look
        // must not count as one (`peek`).
        if !self.peek(|conn| self.behind(conn, upto))? {
            return Ok(0);
        }
        let context = "indexing records' fields";
        let index = |tx: &rusqlite::Transaction<'_>, _now| self.index_batch(tx, limit, upto);
        if wait {
            self.write(context, index)
        } else {
            Ok(self.write_if_free(context, index)?.unwrap_or(0))
        }
    }

    /// The idle indexer's turn: batch after batch while the store stays
    /// idle (see the module docs). `seen` is the `data_version` of the
    /// previous turn.
    fn index_while_idle(&self, seen: &mut Option<i64>) -> Result<(), StoreError> {
        loop {
            if self.since_last_call() < IDLE {
                return Ok(());
            }
            // Another connection's commit since the last look: that
            // process is busy, and a batch would make its claims wait.
            let version = self.peek(|conn| {
                conn.pragma_query_value(None, "data_version", |row| row.get::<_, i64>(0))
                    .map_err(|e| self.err("reading data_version", e))
            })?;
            if seen.replace(version) != Some(version) {
                return Ok(());
            }
            if self.catch_up(INDEX_BATCH, false, i64::MAX)? < u64::from(INDEX_BATCH) {
                return Ok(());
            }
        }
    }

    /// Rewrites the index rows of the record under `key`, replaced in
    /// place with another operation (`before` to `after`, column texts),
    /// in the caller's transaction. Rows are written whether or not the
    /// record is past the mark yet (the indexer's later insert of the same
    /// rows is ignored).
    pub(super) fn reindex(
        &self,
        tx: &Connection,
        key: &RecordKey,
        before: Option<&str>,
        after: Option<&str>,
    ) -> Result<(), StoreError> {
        let rowid: Option<i64> = tx
            .prepare_cached("SELECT rowid FROM records WHERE namespace = ?1 AND key = ?2")
            .and_then(|mut s| {
                s.query_row(
                    rusqlite::params![key.namespace, key.digest.0.as_slice()],
                    |row| row.get(0),
                )
                .optional()
            })
            .map_err(|e| self.err("reindexing a record's fields", e))?;
        let Some(rowid) = rowid else { return Ok(()) };
        if let Some(before) = before {
            self.unindex(tx, rowid, before)?;
        }
        if let Some(after) = after.filter(|a| a.starts_with('{')) {
            tx.prepare_cached(&format!(
                "INSERT OR IGNORE INTO record_fields (name, value, rec) \
                 SELECT f.key, f.value, ?2 FROM {FIELDS_OF} WHERE f.value IS NOT NULL"
            ))
            .and_then(|mut s| s.execute(rusqlite::params![after, rowid]))
            .map_err(|e| self.err("reindexing a record's fields", e))?;
        }
        Ok(())
    }

    /// Removes the index rows of the record at `rowid`, whose kept
    /// operation is `operation` (its column text; nothing unless it is
    /// JSON), in the caller's transaction.
    pub(super) fn unindex(
        &self,
        tx: &Connection,
        rowid: i64,
        operation: &str,
    ) -> Result<(), StoreError> {
        if !operation.starts_with('{') {
            return Ok(());
        }
        tx.prepare_cached(&format!(
            "DELETE FROM record_fields WHERE (name, value, rec) IN \
             (SELECT f.key, f.value, ?2 FROM {FIELDS_OF} WHERE f.value IS NOT NULL)"
        ))
        .and_then(|mut s| s.execute(rusqlite::params![operation, rowid]))
        .map_err(|e| self.err("removing a record's fields from the index", e))?;
        Ok(())
    }

    /// After gc removed records: the mark no higher than the largest rowid
    /// left, so that a record claimed next (one more than the largest) is
    /// after it, in the caller's transaction.
    pub(super) fn lower_mark(&self, tx: &Connection) -> Result<(), StoreError> {
        tx.prepare_cached(
            "UPDATE record_fields_mark SET indexed = \
             min(indexed, coalesce((SELECT max(rowid) FROM records), 0)) WHERE id = 1",
        )
        .and_then(|mut s| s.execute([]))
        .map_err(|e| self.err("lowering the lookup index's mark", e))?;
        Ok(())
    }
}
