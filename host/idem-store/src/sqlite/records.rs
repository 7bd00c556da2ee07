//! The SQLite backend of the store port: a record transaction is one
//! `BEGIN IMMEDIATE` write transaction (the clock read after the write lock
//! is held), and a batch shares one (one commit, one fsync).

use async_trait::async_trait;
use rusqlite::{Connection, Transaction};

use super::connection::{Inner, SqliteStore};
use super::field_index::{INDEX_BATCH, LOOKUP, LOOKUP_CATCH_UP};
use super::row::{EXPIRED, int};
use crate::backend::{Call, Decide, Fences, RecordBackend};
use crate::codec;
use crate::machine::{self};
use crate::port::Batching;
use crate::vocabulary::StoreError;
use crate::vocabulary::{AttemptEntry, AttemptFilter};
use crate::vocabulary::{
    KeptOperation, ListFilter, OwnershipToken, Record, RecordKey, RecordState, StoreOptions,
};

/// Records one gc transaction deletes on SQLite (see
/// `RecordBackend::gc_batch`).
const SQLITE_GC_BATCH: u32 = 16;

/// Fences drawn from the sequence row, in the caller's transaction.
struct SequenceFences<'a> {
    inner: &'a Inner,
    tx: &'a Connection,
}

impl Fences for SequenceFences<'_> {
    fn next_fence(&mut self) -> Result<u64, StoreError> {
        self.inner.next_fence(self.tx)
    }
}

/// Fences for a batch: the sequence read once, when the first is drawn,
/// counted up in memory, and written back once before the commit
/// ([`BatchFences::write_back`]): one statement for the batch instead of one
/// per claim. Safe because the batch holds SQLite's write lock throughout.
struct BatchFences<'a> {
    inner: &'a Inner,
    tx: &'a Connection,
    /// The last fence drawn, once one was.
    last: Option<u64>,
}

impl Fences for BatchFences<'_> {
    fn next_fence(&mut self) -> Result<u64, StoreError> {
        let last = match self.last {
            Some(last) => last,
            None => self.inner.last_fence(self.tx)?,
        };
        let next = last
            .checked_add(1)
            .ok_or_else(|| self.inner.corrupt("the fence sequence is exhausted".into()))?;
        self.last = Some(next);
        Ok(next)
    }
}

impl BatchFences<'_> {
    /// Stores the last fence drawn, if any, in the caller's transaction.
    fn write_back(&self) -> Result<(), StoreError> {
        match self.last {
            Some(last) => self.inner.set_last_fence(self.tx, last),
            None => Ok(()),
        }
    }
}

impl Inner {
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

    /// One record transaction inside `tx`. The outer error is a failure to
    /// read or write (it fails the whole transaction); the inner one a
    /// refusal (nothing of this call was written).
    pub(super) fn transact_in<T>(
        &self,
        tx: &Transaction<'_>,
        now: u64,
        call: &Call,
        decide: &mut Decide<T>,
        fences: &mut dyn Fences,
    ) -> Result<Result<T, StoreError>, StoreError> {
        if let Err(refused) = self.check_epoch(tx, call.ownership.as_ref()) {
            return match refused {
                StoreError::StaleEpoch { .. } => Ok(Err(refused)),
                failed => Err(failed),
            };
        }
        let current = self.load(tx, &call.key)?;
        let created_before = current.as_ref().map(|r| r.created_ms);
        // The operation the lookup index may hold for this row: a record
        // replaced in place with another one is reindexed (rare: an
        // expired record claimed again; ends and take-overs keep it).
        let kept_before = current
            .as_ref()
            .and_then(|r| r.operation.as_ref())
            .and_then(KeptOperation::text)
            .map(str::to_owned);
        let step = match decide(current, now, fences) {
            Err(refused) if refused.is_refusal() => return Ok(Err(refused)),
            Err(failed) => return Err(failed),
            Ok(step) => step,
        };
        if let Some(record) = &step.record {
            self.save(tx, record, created_before.is_some())?;
            let kept_after = record.operation.as_ref().and_then(KeptOperation::text);
            if created_before.is_some() && kept_before.as_deref() != kept_after {
                self.reindex(tx, &call.key, kept_before.as_deref(), kept_after)?;
            }
            // Whether or not this store writes the log now: entries written
            // while it did must stay findable, and be collected with it.
            if let Some(before) = created_before.filter(|b| *b != record.created_ms) {
                self.reanchor(tx, &call.key, before, record.created_ms)?;
            }
        }
        if let Some(entry) = step.entry.as_ref().filter(|_| self.options.attempt_log) {
            // Every entry a record transaction writes is about a record
            // that exists (a refused write's too: it was refused by one).
            let anchor = step
                .record
                .as_ref()
                .map(|r| r.created_ms)
                .or(created_before)
                .ok_or_else(|| {
                    self.corrupt(format!("a log entry about {} has no record", call.key))
                })?;
            match step.record {
                Some(_) => self.append_entry(tx, entry, now, anchor)?,
                // An entry alone is a refused late write.
                None => self.append_refused(tx, entry, now, anchor)?,
            }
        }
        Ok(step.answer)
    }
}

#[async_trait]
impl RecordBackend for SqliteStore {
    fn name(&self) -> &str {
        &self.inner.name
    }

    fn options(&self) -> &StoreOptions {
        &self.inner.options
    }

    fn batching(&self) -> Batching {
        super::BATCHING
    }

    /// One writer: every claim waits for the gc batch in progress, so a
    /// batch is kept to about as long as one commit, and each is followed
    /// by a checkpoint of its own (`collect_garbage`). gc pays two fsyncs
    /// per 16 records so that a claim during a gc waits for one short batch
    /// (or one checkpoint) at most, and no claim's commit copies gc's
    /// deletions back.
    fn gc_batch(&self) -> u32 {
        SQLITE_GC_BATCH
    }

    async fn transact<T: Send + 'static>(
        &self,
        call: Call,
        mut decide: Decide<T>,
    ) -> Result<T, StoreError> {
        // A refusal commits too: it may carry a log entry (a fenced write);
        // otherwise the transaction wrote nothing.
        self.blocking(move |inner| {
            inner.write(call.context, |tx, now| {
                let mut fences = SequenceFences { inner, tx };
                inner.transact_in(tx, now, &call, &mut decide, &mut fences)
            })?
        })
        .await
    }

    /// One write transaction for the whole batch: one commit (one fsync
    /// under `synchronous=full`) instead of one per call. A refused call is
    /// refused alone; a failure of the transaction itself fails the batch,
    /// and then nothing of it was written.
    async fn transact_many<T: Send + 'static>(
        &self,
        calls: Vec<(Call, Decide<T>)>,
    ) -> Result<Vec<Result<T, StoreError>>, StoreError> {
        let context = calls.first().map_or("a batch", |(call, _)| call.context);
        self.blocking(move |inner| {
            inner.write(context, |tx, now| {
                let mut fences = BatchFences {
                    inner,
                    tx,
                    last: None,
                };
                let mut answers = Vec::with_capacity(calls.len());
                for (call, mut decide) in calls {
                    answers.push(inner.transact_in(tx, now, &call, &mut decide, &mut fences)?);
                }
                fences.write_back()?;
                Ok(answers)
            })
        })
        .await
    }

    async fn read(&self, key: &RecordKey) -> Result<(Option<Record>, u64), StoreError> {
        let key = key.clone();
        self.blocking(move |inner| inner.read(|conn, now| Ok((inner.load(conn, &key)?, now))))
            .await
    }

    /// One hop to the connection, one read: every key at one clock.
    async fn read_keys(
        &self,
        keys: &[RecordKey],
    ) -> Result<(Vec<Option<Record>>, u64), StoreError> {
        let keys = keys.to_vec();
        self.blocking(move |inner| {
            inner.read(|conn, now| {
                let records = keys
                    .iter()
                    .map(|key| inner.load(conn, key))
                    .collect::<Result<Vec<_>, _>>()?;
                Ok((records, now))
            })
        })
        .await
    }

    /// A lookup by field reads the lookup index for the records it holds
    /// and scans the rest (`field_index.rs`), after indexing a few records
    /// if any wait; the other fields, and the exact spelling, are checked
    /// by the host.
    async fn read_many(&self, filter: &ListFilter) -> Result<(Vec<Record>, u64), StoreError> {
        let filter = filter.clone();
        self.blocking(move |inner| {
            let lookup = filter.lookup();
            // A lookup stays a read: indexing first only shortens the scan
            // past the mark, which answers all the same if it fails (a full
            // disk, say).
            if lookup.is_some() {
                let _ = inner.catch_up(LOOKUP_CATCH_UP, false, i64::MAX);
            }
            inner.read(|conn, now| {
                // ?10-?12 the place a page starts after, ?13-?15 the one
                // it ends before (`ListFilter::after`, `before`).
                let conditions = format!(
                    "NOT {EXPIRED} AND (?2 IS NULL OR namespace = ?2) AND (?3 IS NULL OR partition = ?3) \
                     AND (?4 IS NULL OR state = ?4) \
                     AND (?10 IS NULL OR updated < ?10 OR (updated = ?10 AND (namespace, key) > (?11, ?12))) \
                     AND (?13 IS NULL OR updated > ?13 OR (updated = ?13 AND (namespace, key) < (?14, ?15))) \
                     ORDER BY updated DESC, namespace, key LIMIT ?5"
                );
                // The found rowids drive the join (CROSS JOIN keeps that
                // order): the planner may not walk `records_updated` whole
                // for the ORDER BY instead.
                let sql = match lookup {
                    None => format!(
                        "SELECT {} FROM records WHERE {conditions}",
                        codec::column_list("")
                    ),
                    Some(_) => format!(
                        "SELECT {} FROM ({LOOKUP}) m CROSS JOIN records r ON r.rowid = m.rec \
                         WHERE {conditions}",
                        codec::column_list("r.")
                    ),
                };
                let fail = |e| inner.err("listing records", e);
                let mut stmt = conn.prepare_cached(&sql).map_err(fail)?;
                let (now_i, limit) = (int(now), filter.backend_limit().map_or(-1, i64::from));
                let state = filter.state.map(RecordState::as_str);
                let needle = filter.needle();
                let (name, text, json) = match &lookup {
                    Some(l) => (Some(l.name), Some(l.text), l.json),
                    None => (None, None, None),
                };
                let place = |c: &Option<crate::ListCursor>| match c {
                    Some(c) => (
                        Some(int(c.updated_ms)),
                        Some(c.key.namespace.clone()),
                        Some(c.key.digest.0.to_vec()),
                    ),
                    None => (None, None, None),
                };
                let (after, before) = (place(&filter.after), place(&filter.before));
                // Every parameter, whether or not the statement reads it
                // (numbered ones count up to the largest).
                let params: [&dyn rusqlite::ToSql; 15] = [
                    &now_i,
                    &filter.namespace,
                    &filter.partition,
                    &state,
                    &limit,
                    &name,
                    &text,
                    &json,
                    &needle,
                    &after.0,
                    &after.1,
                    &after.2,
                    &before.0,
                    &before.1,
                    &before.2,
                ];
                let mut rows = stmt.query(params.as_slice()).map_err(fail)?;
                let mut out = Vec::new();
                while let Some(row) = rows.next().map_err(fail)? {
                    out.push(inner.decode(row)?);
                }
                Ok((out, now))
            })
        })
        .await
    }

    async fn index_end(&self) -> Result<Option<i64>, StoreError> {
        self.blocking(|inner| inner.index_end().map(Some)).await
    }

    async fn index_batch(&self, upto: i64) -> Result<u64, StoreError> {
        self.blocking(move |inner| inner.catch_up(INDEX_BATCH, true, upto))
            .await
    }

    async fn collect_garbage(&self, limit: u32) -> Result<u64, StoreError> {
        self.blocking(move |inner| {
            let removed = inner.write("collecting garbage", |tx, now| {
                let fail = |e| inner.err("collecting garbage", e);
                // Found by the retention index, at most `limit`, then
                // deleted through the key index with their entries (through
                // the log's record index: anchor, namespace, key).
                type Victim = (String, Vec<u8>, i64, i64, Option<String>);
                let victims: Vec<Victim> = tx
                    .prepare_cached(&format!(
                        "SELECT namespace, key, created, rowid, operation FROM records WHERE {EXPIRED} LIMIT ?2"
                    ))
                    .map_err(fail)?
                    .query_map(rusqlite::params![int(now), i64::from(limit)], |row| {
                        Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?, row.get(4)?))
                    })
                    .map_err(fail)?
                    .collect::<Result<_, _>>()
                    .map_err(fail)?;
                let mut entries = tx
                    .prepare_cached(
                        "DELETE FROM attempts WHERE anchor = ?3 AND namespace = ?1 AND key = ?2",
                    )
                    .map_err(fail)?;
                let mut records = tx
                    .prepare_cached("DELETE FROM records WHERE namespace = ?1 AND key = ?2")
                    .map_err(fail)?;
                for (namespace, key, created, rowid, operation) in &victims {
                    if let Some(operation) = operation {
                        inner.unindex(tx, *rowid, operation)?;
                    }
                    entries
                        .execute(rusqlite::params![namespace, key, created])
                        .map_err(fail)?;
                    records
                        .execute(rusqlite::params![namespace, key])
                        .map_err(fail)?;
                }
                if !victims.is_empty() {
                    inner.lower_mark(tx)?;
                }
                Ok(victims.len() as u64)
            })?;
            // Then the log it grew copied back, in gc's own turn (a claim
            // waiting meanwhile goes first): left to the automatic
            // checkpoint, a thousand pages of deletions would be copied
            // inside whichever commit crossed the threshold, often a
            // claim's, and that claim would wait for the copy (see
            // `docs/benchmarks.md`, growth and gc).
            inner.checkpoint()?;
            Ok(removed)
        })
        .await
    }

    async fn append(&self, entries: Vec<AttemptEntry>) -> Result<(), StoreError> {
        if !self.inner.options.attempt_log {
            return Ok(());
        }
        self.blocking(move |inner| {
            inner.write("logging answers", |tx, _now| {
                for entry in &entries {
                    // An answer about a record gc removed meanwhile goes
                    // with the record's own entries (`Records::log_answers`).
                    if let Some(anchor) = inner.anchor_of(tx, &entry.key)? {
                        inner.append_entry(tx, entry, entry.at_ms, anchor)?;
                    }
                }
                Ok(())
            })
        })
        .await
    }

    async fn read_attempts(&self, filter: &AttemptFilter) -> Result<Vec<AttemptEntry>, StoreError> {
        let filter = filter.clone();
        self.blocking(move |inner| inner.read(|conn, _now| inner.load_attempts(conn, &filter)))
            .await
    }
}
