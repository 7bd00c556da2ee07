//! Rows of a SQLite store: records through the shared codec
//! (`crate::codec`), the fence and epoch sequences, memberships and job
//! leases. Every function runs inside the caller's transaction or read.

use std::sync::LazyLock;

use rusqlite::{Connection, OptionalExtension};

use super::connection::Inner;
use crate::codec::{self, AttemptRow, ColumnReader, RecordRow, attempt_values, record_values};
use crate::vocabulary::StoreError;
use crate::vocabulary::{AttemptEntry, AttemptFilter};
use crate::vocabulary::{JobLease, Record, RecordKey};

impl ColumnReader for rusqlite::Row<'_> {
    fn opt_text(&self, column: &str) -> Result<Option<String>, String> {
        self.get(column).map_err(|e| e.to_string())
    }

    fn opt_bytes(&self, column: &str) -> Result<Option<Vec<u8>>, String> {
        self.get(column).map_err(|e| e.to_string())
    }

    fn opt_i64(&self, column: &str) -> Result<Option<i64>, String> {
        self.get(column).map_err(|e| e.to_string())
    }

    fn opt_i32(&self, column: &str) -> Result<Option<i32>, String> {
        self.get(column).map_err(|e| e.to_string())
    }

    fn opt_bool(&self, column: &str) -> Result<Option<bool>, String> {
        self.get(column).map_err(|e| e.to_string())
    }
}

/// SQL for "counts as absent" (see `machine::is_expired`), `?1` = now.
pub(super) const EXPIRED: &str =
    "(retain_until < ?1 AND NOT (state = 'in-progress' AND lease_until > ?1))";

/// A store-clock reading or a stored time as a SQL integer.
pub(super) fn int(v: u64) -> i64 {
    // Times are clamped far below i64::MAX (machine::after); saturate anyway.
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// The attempt log's filters after the namespace and key (`?1`, `?2`).
const ATTEMPTS_REST: &str = "(?3 IS NULL OR at_ms >= ?3) AND (?4 IS NULL OR at_ms < ?4) \
     AND (?5 IS NULL OR id > ?5) ORDER BY id LIMIT ?6";

/// One record's timeline: an equality on the log's record index, whose
/// anchor is the record's `created` (see migration 5), found through the
/// record. Written as `?2 IS NULL OR key = ?2` in one statement with
/// [`ATTEMPTS`], SQLite could not use the index and scanned the whole log
/// for each key (a run's "why" lines read a thousand timelines).
static ATTEMPTS_BY_KEY: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT id, {} FROM attempts \
         WHERE anchor = (SELECT created FROM records WHERE namespace = ?1 AND key = ?2) \
         AND namespace = ?1 AND key = ?2 AND {ATTEMPTS_REST}",
        codec::attempt_column_list()
    )
});

/// The log, or a namespace's (`?2` is always NULL: the numbering is
/// shared with [`ATTEMPTS_BY_KEY`]).
static ATTEMPTS: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT id, {} FROM attempts WHERE (?1 IS NULL OR namespace = ?1) \
         AND ?2 IS NULL AND {ATTEMPTS_REST}",
        codec::attempt_column_list()
    )
});

impl Inner {
    /// Decodes a record row (a `SELECT` of every column).
    pub(super) fn decode(&self, row: &rusqlite::Row<'_>) -> Result<Record, StoreError> {
        codec::decode(row, "", &self.name)?
            .ok_or_else(|| self.corrupt("a record row has no namespace".into()))
    }

    /// The record under `key`, as stored.
    pub(super) fn load(
        &self,
        tx: &Connection,
        key: &RecordKey,
    ) -> Result<Option<Record>, StoreError> {
        // Cached statements: parsing the SQL cost more than running it.
        static SELECT: LazyLock<String> = LazyLock::new(|| {
            format!(
                "SELECT {} FROM records WHERE namespace = ?1 AND key = ?2",
                codec::column_list("")
            )
        });
        let mut stmt = tx
            .prepare_cached(&SELECT)
            .map_err(|e| self.err("reading a record", e))?;
        let mut rows = stmt
            .query(rusqlite::params![key.namespace, key.digest.0.as_slice()])
            .map_err(|e| self.err("reading a record", e))?;
        match rows.next().map_err(|e| self.err("reading a record", e))? {
            Some(row) => self.decode(row).map(Some),
            None => Ok(None),
        }
    }

    /// Writes `record`: a new row when the key has none (`replaces` is
    /// false), else in place of the row under its key.
    ///
    /// An existing row is updated where it stands, never replaced (which
    /// would delete it and append it again with a new rowid and a new key
    /// index entry): records are stored in claim order (migration 6), so an
    /// end rewrites a row on a page the claims made with it share, and the
    /// key index is written once per record, by its claim. Two statements,
    /// not an upsert: the caller read the row, and an upsert builds and
    /// checks the row as an insert before it updates.
    pub(super) fn save(
        &self,
        tx: &Connection,
        record: &Record,
        replaces: bool,
    ) -> Result<(), StoreError> {
        static INSERT: LazyLock<String> = LazyLock::new(|| {
            let placeholders: Vec<String> = (1..=codec::COLUMNS.len())
                .map(|i| format!("?{i}"))
                .collect();
            format!(
                "INSERT INTO records ({}) VALUES ({})",
                codec::column_list(""),
                placeholders.join(", ")
            )
        });
        static UPDATE: LazyLock<String> = LazyLock::new(|| {
            let mut key = Vec::new();
            let mut set = Vec::new();
            for (i, column) in codec::COLUMNS.iter().enumerate() {
                let assign = format!("{column} = ?{}", i + 1);
                match *column {
                    "namespace" | "key" => key.push(assign),
                    _ => set.push(assign),
                }
            }
            format!(
                "UPDATE records SET {} WHERE {}",
                set.join(", "),
                key.join(" AND ")
            )
        });
        let row = RecordRow::of(record)?;
        let sql: &str = if replaces { &UPDATE } else { &INSERT };
        let written = tx
            .prepare_cached(sql)
            .and_then(|mut stmt| stmt.execute(record_values!(&row, dyn rusqlite::ToSql)))
            .map_err(|e| self.err("writing a record", e))?;
        if written != 1 {
            return Err(self.corrupt(format!(
                "writing the record under {} changed {written} rows",
                record.key
            )));
        }
        Ok(())
    }

    /// The next fence, in the caller's transaction: a store-wide sequence
    /// that survives gc (records are deleted, the sequence row is not).
    pub(super) fn next_fence(&self, tx: &Connection) -> Result<u64, StoreError> {
        let fence: i64 = tx
            .prepare_cached("UPDATE fence_seq SET last = last + 1 WHERE id = 1 RETURNING last")
            .and_then(|mut stmt| stmt.query_row([], |row| row.get(0)))
            .map_err(|e| self.err("issuing a fence", e))?;
        u64::try_from(fence).map_err(|_| self.corrupt(format!("the fence sequence is at {fence}")))
    }

    /// The last fence issued, in the caller's transaction (a batch draws
    /// its fences from it in memory, then [`Inner::set_last_fence`]).
    pub(super) fn last_fence(&self, tx: &Connection) -> Result<u64, StoreError> {
        let fence: i64 = tx
            .prepare_cached("SELECT last FROM fence_seq WHERE id = 1")
            .and_then(|mut stmt| stmt.query_row([], |row| row.get(0)))
            .map_err(|e| self.err("issuing a fence", e))?;
        u64::try_from(fence).map_err(|_| self.corrupt(format!("the fence sequence is at {fence}")))
    }

    /// Moves the fence sequence to `last`, in the caller's transaction.
    pub(super) fn set_last_fence(&self, tx: &Connection, last: u64) -> Result<(), StoreError> {
        tx.prepare_cached("UPDATE fence_seq SET last = ?1 WHERE id = 1")
            .and_then(|mut stmt| stmt.execute([int(last)]))
            .map_err(|e| self.err("issuing a fence", e))?;
        Ok(())
    }

    /// The next ownership epoch, in the caller's transaction.
    pub(super) fn next_epoch(&self, tx: &Connection) -> Result<u64, StoreError> {
        let epoch: i64 = tx
            .query_row(
                "UPDATE epoch_seq SET last = last + 1 WHERE id = 1 RETURNING last",
                [],
                |row| row.get(0),
            )
            .map_err(|e| self.err("issuing an epoch", e))?;
        u64::try_from(epoch).map_err(|_| self.corrupt(format!("the epoch sequence is at {epoch}")))
    }

    /// A group's epoch and members.
    pub(super) fn load_membership(
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
            // Joined by newlines, which names never contain.
            Ok((epoch, members.split('\n').map(str::to_string).collect()))
        })
        .transpose()
    }

    /// Writes a group's membership (members joined by newlines, which names
    /// never contain).
    pub(super) fn save_membership(
        &self,
        tx: &Connection,
        group: &str,
        epoch: u64,
        members: &[String],
        now: u64,
    ) -> Result<(), StoreError> {
        tx.execute(
            "INSERT OR REPLACE INTO memberships (grp, epoch, members, updated) VALUES (?1, ?2, ?3, ?4)",
            rusqlite::params![group, int(epoch), members.join("\n"), int(now)],
        )
        .map_err(|e| self.err("writing a membership", e))?;
        Ok(())
    }

    pub(super) fn load_job(
        &self,
        tx: &Connection,
        job: &str,
    ) -> Result<Option<JobLease>, StoreError> {
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

    pub(super) fn save_job(&self, tx: &Connection, lease: &JobLease) -> Result<(), StoreError> {
        tx.execute(
            "INSERT OR REPLACE INTO job_leases (job, holder, fence, lease_until) VALUES (?1, ?2, ?3, ?4)",
            rusqlite::params![
                lease.job,
                lease.holder,
                int(lease.fence),
                int(lease.lease_until_ms)
            ],
        )
        .map_err(|e| self.err("writing a job lease", e))?;
        Ok(())
    }

    /// Appends a refused late write's `entry`, stamped `now`, unless the
    /// log already holds one for this record, fence and reason: its retries
    /// add nothing, and repeating one cannot grow the log.
    pub(super) fn append_refused(
        &self,
        tx: &Connection,
        entry: &AttemptEntry,
        now: u64,
        anchor: u64,
    ) -> Result<(), StoreError> {
        static INSERT: LazyLock<String> = LazyLock::new(|| {
            let n = codec::ATTEMPT_COLUMNS.len();
            format!(
                "INSERT INTO attempts ({}, anchor) SELECT {} \
                 WHERE NOT EXISTS (SELECT 1 FROM attempts WHERE anchor = ?{anchor} \
                   AND namespace = ?1 AND key = ?2 AND fence = ?3 AND event = ?4 \
                   AND detail IS ?{detail})",
                codec::attempt_column_list(),
                entry_placeholders(),
                anchor = n + 1,
                detail = n,
            )
        });
        self.insert_entry(tx, &INSERT, entry, now, anchor)
    }

    /// Appends `entry` to the attempt log, stamped `now`.
    pub(super) fn append_entry(
        &self,
        tx: &Connection,
        entry: &AttemptEntry,
        now: u64,
        anchor: u64,
    ) -> Result<(), StoreError> {
        static INSERT: LazyLock<String> = LazyLock::new(|| {
            format!(
                "INSERT INTO attempts ({}, anchor) VALUES ({})",
                codec::attempt_column_list(),
                entry_placeholders()
            )
        });
        self.insert_entry(tx, &INSERT, entry, now, anchor)
    }

    /// Runs `insert` with `entry`'s values and `anchor` as its parameters
    /// ([`entry_placeholders`]).
    fn insert_entry(
        &self,
        tx: &Connection,
        insert: &str,
        entry: &AttemptEntry,
        now: u64,
        anchor: u64,
    ) -> Result<(), StoreError> {
        let row = AttemptRow::of(entry, now);
        let anchor = int(anchor);
        let values = attempt_values!(&row, dyn rusqlite::ToSql);
        let fail = |e| self.err("writing the attempt log", e);
        tx.prepare_cached(insert)
            .map_err(fail)?
            .execute(rusqlite::params_from_iter(
                values.into_iter().chain([&anchor as &dyn rusqlite::ToSql]),
            ))
            .map_err(fail)?;
        Ok(())
    }

    /// The anchor of the entries about the record under `key` (its
    /// `created`), or `None` when there is no record.
    pub(super) fn anchor_of(
        &self,
        tx: &Connection,
        key: &RecordKey,
    ) -> Result<Option<u64>, StoreError> {
        let fail = |e| self.err("reading a record", e);
        let created: Option<i64> = tx
            .prepare_cached("SELECT created FROM records WHERE namespace = ?1 AND key = ?2")
            .map_err(fail)?
            .query_row(
                rusqlite::params![key.namespace, key.digest.0.as_slice()],
                |row| row.get(0),
            )
            .optional()
            .map_err(fail)?;
        Ok(created.map(|c| u64::try_from(c).unwrap_or(0)))
    }

    /// Moves the entries about the record under `key` from anchor `from` to
    /// `to`: an expired record was replaced by a fresh one (a new
    /// `created`), and its history stays in the key's timeline until gc
    /// removes both.
    pub(super) fn reanchor(
        &self,
        tx: &Connection,
        key: &RecordKey,
        from: u64,
        to: u64,
    ) -> Result<(), StoreError> {
        tx.prepare_cached(
            "UPDATE attempts SET anchor = ?4 WHERE anchor = ?3 AND namespace = ?1 AND key = ?2",
        )
        .and_then(|mut stmt| {
            stmt.execute(rusqlite::params![
                key.namespace,
                key.digest.0.as_slice(),
                int(from),
                int(to)
            ])
        })
        .map_err(|e| self.err("writing the attempt log", e))?;
        Ok(())
    }

    /// The attempt-log entries `filter` selects, oldest first.
    pub(super) fn load_attempts(
        &self,
        conn: &Connection,
        filter: &AttemptFilter,
    ) -> Result<Vec<AttemptEntry>, StoreError> {
        let fail = |e| self.err("reading the attempt log", e);
        let opt = |v: Option<u64>| v.map(super::row::int);
        // A key's timeline by the key alone (a key outside the filter's
        // namespace never reaches a backend).
        let (sql, namespace, key): (&str, Option<&str>, Option<&[u8]>) = match &filter.key {
            Some(k) => (&ATTEMPTS_BY_KEY, Some(&k.namespace), Some(&k.digest.0[..])),
            None => (&ATTEMPTS, filter.namespace.as_deref(), None),
        };
        let mut stmt = conn.prepare_cached(sql).map_err(fail)?;
        let mut rows = stmt
            .query(rusqlite::params![
                namespace,
                key,
                opt(filter.since_ms),
                opt(filter.until_ms),
                opt(filter.after_id),
                filter.limit.map_or(-1, i64::from),
            ])
            .map_err(fail)?;
        let mut out = Vec::new();
        while let Some(row) = rows.next().map_err(fail)? {
            out.push(codec::decode_attempt(row, &self.name)?);
        }
        Ok(out)
    }
}

/// `?1, …, ?N`: an attempt entry's columns, then its anchor.
fn entry_placeholders() -> String {
    (1..=codec::ATTEMPT_COLUMNS.len() + 1)
        .map(|i| format!("?{i}"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A key's timeline is read through the log's record index (its
    /// record found through the key index), not by scanning the log (what
    /// SQLite plans, on the real schema).
    #[test]
    fn a_timeline_is_read_through_the_record_index() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("plan.db");
        // Created and migrated by the store; planned on a connection of
        // the test's own.
        super::super::SqliteStore::open(
            &path,
            super::super::SqliteOptions::default(),
            crate::StoreOptions::default(),
        )
        .expect("open");
        let conn = Connection::open(&path).expect("connection");
        let plan: Vec<String> = conn
            .prepare(&format!("EXPLAIN QUERY PLAN {}", *ATTEMPTS_BY_KEY))
            .and_then(|mut stmt| {
                stmt.query_map(
                    rusqlite::params![
                        "billing",
                        &[0u8; 32][..],
                        None::<i64>,
                        None::<i64>,
                        None::<i64>,
                        -1
                    ],
                    |row| row.get::<_, String>(3),
                )?
                .collect()
            })
            .expect("plan");
        assert!(
            plan.iter()
                .any(|step| step.contains("USING INDEX attempts_by_record")),
            "{plan:?}"
        );
        assert!(
            !plan.iter().any(|step| step.starts_with("SCAN")),
            "{plan:?}"
        );
    }
}
