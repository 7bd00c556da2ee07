//! The PostgreSQL records backend: the two-round-trip record transaction,
//! the one-statement fast paths, the reads, gc and the attempt log.

use async_trait::async_trait;
use tokio_postgres::types::ToSql;

use super::connection::Attempt;
use super::fast::{ClaimValues, FinishValues};
use super::row::values;
use super::{Inner, PostgresStore};
use crate::backend::{BatchAnswer, Call, Decide, Fences, RecordBackend, Written};
use crate::codec::{self, AttemptRow, RecordRow, attempt_values};
use crate::machine;
use crate::port::Batching;
use crate::vocabulary::StoreError;
use crate::vocabulary::{AttemptEntry, AttemptFilter};
use crate::vocabulary::{
    ClaimRequest, Finish, ListFilter, Outcome, Record, RecordKey, RecordState, StoreOptions,
};

/// The fence drawn in the transaction's first round trip (when the call
/// asked for one), handed to the decision at most once.
struct Drawn<'a> {
    inner: &'a Inner,
    fence: Option<u64>,
}

impl Fences for Drawn<'_> {
    fn next_fence(&mut self) -> Result<u64, StoreError> {
        self.fence.take().ok_or_else(|| StoreError::Backend {
            store: self.inner.name.clone(),
            context: "issuing a fence",
            cause: crate::vocabulary::cause("the decision asked for a fence its call did not draw"),
        })
    }
}

impl Inner {
    /// One try of a record transaction:
    ///
    /// 1. one round trip: `BEGIN`, `SELECT … FOR UPDATE` of the record,
    ///    then the clock (and, when the call draws one, the next fence),
    ///    read after the row lock is held so that "now" is ordered with the
    ///    writes it decides;
    /// 2. with an ownership token, one more: the group's epoch `FOR SHARE`
    ///    (held to commit, so a membership change waits for this call); a
    ///    stale one is refused;
    /// 3. `decide` turns the record, now and fence into a [`Step`] or a
    ///    refusal;
    /// 4. one round trip: the write, conditional on the key and the fence
    ///    that was read (or, with no row, an insert that yields to a racing
    ///    one), then `COMMIT`; or just `ROLLBACK`.
    ///
    /// [`Attempt::Again`] after a serialization failure, a deadlock or a
    /// lost insert race: each of those changed nothing.
    async fn transact_once<T>(
        &self,
        call: &Call,
        decide: &mut Decide<T>,
    ) -> Result<Attempt<T>, StoreError> {
        let context = call.context;
        let fail = |e| self.err(context, e);
        let (manual, offset) = self.clock();
        let key_bytes = call.key.digest.0.to_vec();
        let mut conn = self.conn().await?;
        let lock = conn.prepare_cached(&self.sql.lock).await.map_err(fail)?;
        let now_sql = if call.draws_fence {
            &self.sql.now_and_fence
        } else {
            &self.sql.now
        };
        let now = conn.prepare_cached(now_sql).await.map_err(fail)?;
        let key_params: [&(dyn ToSql + Sync); 2] = [&call.key.namespace, &key_bytes];
        let clock_params: [&(dyn ToSql + Sync); 2] = [&manual, &offset];
        conn.in_transaction = true;
        // Pipelined: `biased` polls (so sends) them in this order.
        let (begun, row, clock) = tokio::join!(
            biased;
            conn.batch_execute("BEGIN"),
            conn.query_opt(&lock, &key_params),
            conn.query_one(&now, &clock_params),
        );
        let read = begun.and(row).and_then(|row| Ok((row, clock?)));
        // Dropping `conn` mid-transaction discards it.
        let Attempt::Done((row, clock)) = self.settle(context, read)? else {
            return Ok(Attempt::Again);
        };
        if let Some(token) = &call.ownership {
            let epoch = conn
                .prepare_cached(&self.sql.epoch_for_share)
                .await
                .map_err(fail)?;
            let read = conn.query_opt(&epoch, &[&token.group]).await;
            let Attempt::Done(row) = self.settle(context, read)? else {
                return Ok(Attempt::Again);
            };
            let current = row
                .map(|row| self.unsigned(row.get(0), "an epoch"))
                .transpose()?;
            if let Err(stale) = machine::check_epoch(Some(token), current) {
                conn.batch_execute("ROLLBACK").await.map_err(fail)?;
                conn.in_transaction = false;
                return Err(stale);
            }
        }
        let current = row
            .map(|row| self.decode_prefixed(&row, ""))
            .transpose()?
            .flatten();
        let now_ms = self.unsigned(clock.get::<_, i64>(0), "the clock")?;
        let fence = clock
            .get::<_, Option<i64>>(1)
            .map(|f| self.unsigned(f, "the fence sequence"))
            .transpose()?;
        let read_fence = current.as_ref().map(|r| r.fence);
        let mut fences = Drawn { inner: self, fence };
        let step = match decide(current, now_ms, &mut fences) {
            Ok(step) => step,
            Err(refused) => {
                conn.batch_execute("ROLLBACK").await.map_err(fail)?;
                conn.in_transaction = false;
                return Err(refused);
            }
        };
        let entry = step
            .entry
            .as_ref()
            .filter(|_| self.options.attempt_log)
            .map(|e| AttemptRow::of(e, now_ms));
        let Some(record) = step.record else {
            // No record change: an entry alone (a refused late write) is
            // committed, once per key, fence and reason; nothing at all is
            // rolled back.
            let Some(entry) = &entry else {
                conn.batch_execute("ROLLBACK").await.map_err(fail)?;
                conn.in_transaction = false;
                return Ok(Attempt::Done(step.answer?));
            };
            let append = conn
                .prepare_cached(&self.sql.append_refused)
                .await
                .map_err(fail)?;
            let params = attempt_values!(entry, dyn ToSql + Sync);
            let (appended, committed) = tokio::join!(
                biased;
                conn.execute(&append, &params),
                conn.batch_execute("COMMIT"),
            );
            if committed.is_ok() {
                conn.in_transaction = false;
            }
            return match self.settle(context, appended.and(committed))? {
                Attempt::Done(()) => Ok(Attempt::Done(step.answer?)),
                Attempt::Again => Ok(Attempt::Again),
            };
        };
        let row = RecordRow::of(&record)?;
        let mut params: Vec<&(dyn ToSql + Sync)> = values(&row).to_vec();
        let expected = read_fence.map(|f| i64::try_from(f).unwrap_or(i64::MAX));
        let write_sql = match (&expected, &entry) {
            (Some(expected), logged) => {
                params.push(expected);
                if logged.is_some() {
                    &self.sql.update_logged
                } else {
                    &self.sql.update
                }
            }
            (None, Some(_)) => &self.sql.insert_logged,
            (None, None) => &self.sql.insert,
        };
        if let Some(entry) = &entry {
            params.extend(attempt_values!(entry, dyn ToSql + Sync));
        }
        let write = conn.prepare_cached(write_sql).await.map_err(fail)?;
        // If the write fails, COMMIT of the aborted transaction rolls back:
        // nothing is half-written. The entry is inserted only from the
        // written row (a CTE), so a write that lost its race logs nothing.
        let (written, committed) = tokio::join!(
            biased;
            conn.execute(&write, &params),
            conn.batch_execute("COMMIT"),
        );
        if committed.is_ok() {
            // COMMIT answered: the transaction is over either way.
            conn.in_transaction = false;
        }
        match self.settle(context, written.and_then(|n| Ok((n, committed?))))? {
            Attempt::Done((1, ())) => Ok(Attempt::Done(step.answer?)),
            // Lost the race to insert a fresh key (or the row changed under
            // a lock it could not have: defensive): try again.
            Attempt::Done(_) | Attempt::Again => Ok(Attempt::Again),
        }
    }

    /// One try of the one-statement fresh claim.
    async fn fast_claim_once(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Attempt<Option<Written>>, StoreError> {
        let conn = self.conn().await?;
        let statement = conn
            .prepare_cached(sql)
            .await
            .map_err(|e| self.err("claiming", e))?;
        match self.settle("claiming", conn.query_opt(&statement, params).await)? {
            Attempt::Done(row) => Ok(Attempt::Done(self.claim_written(row)?)),
            Attempt::Again => Ok(Attempt::Again),
        }
    }
}

#[async_trait]
impl RecordBackend for PostgresStore {
    fn name(&self) -> &str {
        &self.inner.name
    }

    fn options(&self) -> &StoreOptions {
        &self.inner.options
    }

    fn batching(&self) -> Batching {
        super::BATCHING
    }

    async fn transact<T: Send + 'static>(
        &self,
        call: Call,
        mut decide: Decide<T>,
    ) -> Result<T, StoreError> {
        let inner = &self.inner;
        let mut retries = inner.retries(
            call.context,
            "attempts that conflicted with concurrent writers",
        );
        loop {
            match inner.transact_once(&call, &mut decide).await? {
                Attempt::Done(out) => return Ok(out),
                Attempt::Again => retries.again()?,
            }
        }
    }

    async fn fast_claim(&self, request: &ClaimRequest) -> Result<Option<Written>, StoreError> {
        let inner = &self.inner;
        let values = ClaimValues::of(inner, request);
        let (sql, params) = values.statement(inner);
        let mut retries = inner.retries("claiming", "serialization failures");
        loop {
            match inner.fast_claim_once(sql, &params).await? {
                Attempt::Done(written) => return Ok(written),
                Attempt::Again => retries.again()?,
            }
        }
    }

    async fn fast_finish(
        &self,
        key: &RecordKey,
        fence: u64,
        state: RecordState,
        outcome: &Outcome,
    ) -> Result<Option<Written>, StoreError> {
        let inner = &self.inner;
        let values = FinishValues::of(inner, key, fence, state, outcome);
        let rows = inner
            .query(
                "finishing an attempt",
                &inner.sql.finish_fast,
                &values.params(),
            )
            .await?;
        inner.finish_written(&rows)
    }

    async fn batch_claim(
        &self,
        requests: &[&ClaimRequest],
    ) -> Result<Option<Vec<BatchAnswer>>, StoreError> {
        self.claim_statement(requests).await.map(Some)
    }

    async fn batch_finish(
        &self,
        finishes: &[&Finish],
    ) -> Result<Option<Vec<Option<Written>>>, StoreError> {
        self.finish_statement(finishes).await.map(Some)
    }

    async fn read(&self, key: &RecordKey) -> Result<(Option<Record>, u64), StoreError> {
        let inner = &self.inner;
        let (manual, offset) = inner.clock();
        let key_bytes = key.digest.0.to_vec();
        // One statement is one snapshot: the clock and the row agree.
        let rows = inner
            .query(
                "reading a record",
                &inner.sql.get,
                &[&key.namespace, &key_bytes, &manual, &offset],
            )
            .await?;
        let row = rows
            .first()
            .ok_or_else(|| inner.corrupt("the clock query returned no row".into()))?;
        let now = inner.unsigned(inner.column(row, "ms")?, "the clock")?;
        Ok((inner.decode_prefixed(row, "")?, now))
    }

    /// One statement: every key at one clock, in the order asked.
    async fn read_keys(
        &self,
        keys: &[RecordKey],
    ) -> Result<(Vec<Option<Record>>, u64), StoreError> {
        let inner = &self.inner;
        let (manual, offset) = inner.clock();
        let namespaces: Vec<&str> = keys.iter().map(|k| k.namespace.as_str()).collect();
        let digests: Vec<Vec<u8>> = keys.iter().map(|k| k.digest.0.to_vec()).collect();
        let rows = inner
            .query(
                "reading records",
                &inner.sql.get_many,
                &[&manual, &offset, &namespaces, &digests],
            )
            .await?;
        let mut now = None;
        let mut records = Vec::with_capacity(rows.len());
        for row in &rows {
            now.get_or_insert(inner.unsigned(inner.column(row, "ms")?, "the clock")?);
            records.push(inner.decode_prefixed(row, "")?);
        }
        let now = match now {
            Some(now) => now,
            None => self.read(&keys[0]).await?.1,
        };
        Ok((records, now))
    }

    async fn read_many(&self, filter: &ListFilter) -> Result<(Vec<Record>, u64), StoreError> {
        let inner = &self.inner;
        let (manual, offset) = inner.clock();
        let limit = filter.backend_limit().map(i64::from);
        let state = filter.state.map(RecordState::as_str);
        let place = |c: &Option<crate::ListCursor>| match c {
            Some(c) => (
                Some(i64::try_from(c.updated_ms).unwrap_or(i64::MAX)),
                Some(c.key.namespace.clone()),
                Some(c.key.digest.0.to_vec()),
            ),
            None => (None, None, None),
        };
        let (after, before) = (place(&filter.after), place(&filter.before));
        let rows = match filter.lookup() {
            None => {
                inner
                    .query(
                        "listing records",
                        &inner.sql.list,
                        &[
                            &manual,
                            &offset,
                            &filter.namespace,
                            &filter.partition,
                            &state,
                            &limit,
                            &after.0,
                            &after.1,
                            &after.2,
                            &before.0,
                            &before.1,
                            &before.2,
                        ],
                    )
                    .await?
            }
            Some(lookup) => {
                let (text, json) = lookup.containment();
                inner
                    .query(
                        "looking records up by a field",
                        &inner.sql.list_by_field,
                        &[
                            &manual,
                            &offset,
                            &filter.namespace,
                            &filter.partition,
                            &state,
                            &limit,
                            &text,
                            &json,
                            &after.0,
                            &after.1,
                            &after.2,
                            &before.0,
                            &before.1,
                            &before.2,
                        ],
                    )
                    .await?
            }
        };
        let mut now = None;
        let mut out = Vec::with_capacity(rows.len());
        for row in &rows {
            now = Some(inner.unsigned(inner.column(row, "ms")?, "the clock")?);
            if let Some(record) = inner.decode_prefixed(row, "")? {
                out.push(record);
            }
        }
        let now = now.ok_or_else(|| inner.corrupt("the clock query returned no row".into()))?;
        Ok((out, now))
    }

    async fn collect_garbage(&self, limit: u32) -> Result<u64, StoreError> {
        let inner = &self.inner;
        let (manual, offset) = inner.clock();
        let context = "collecting garbage";
        let mut retries = inner.retries(context, "serialization failures");
        loop {
            let conn = inner.conn().await?;
            let statement = conn
                .prepare_cached(&inner.sql.gc)
                .await
                .map_err(|e| inner.err(context, e))?;
            let limit = i64::from(limit);
            let deleted = conn
                .query_one(&statement, &[&manual, &offset, &limit])
                .await;
            match inner.settle(context, deleted)? {
                Attempt::Done(row) => return inner.unsigned(row.get(0), "a count"),
                Attempt::Again => retries.again()?,
            }
        }
    }

    async fn append(&self, entries: Vec<AttemptEntry>) -> Result<(), StoreError> {
        let inner = &self.inner;
        if !inner.options.attempt_log {
            return Ok(());
        }
        let rows: Vec<AttemptRow> = entries.iter().map(|e| AttemptRow::of(e, e.at_ms)).collect();
        let namespaces: Vec<&str> = rows.iter().map(|r| r.namespace.as_str()).collect();
        let keys: Vec<&[u8]> = rows.iter().map(|r| r.key.as_slice()).collect();
        let fences: Vec<i64> = rows.iter().map(|r| r.fence).collect();
        let events: Vec<&str> = rows.iter().map(|r| r.event).collect();
        let run_ids: Vec<Option<&str>> = rows.iter().map(|r| r.run_id.as_deref()).collect();
        let triggers: Vec<Option<&str>> = rows.iter().map(|r| r.trigger.as_deref()).collect();
        let attempts: Vec<Option<i64>> = rows.iter().map(|r| r.attempt).collect();
        let hosts: Vec<Option<&str>> = rows.iter().map(|r| r.host.as_deref()).collect();
        let pids: Vec<Option<i64>> = rows.iter().map(|r| r.pid).collect();
        let times: Vec<i64> = rows.iter().map(|r| r.at_ms).collect();
        let policies: Vec<Option<&str>> = rows.iter().map(|r| r.policy_digest.as_deref()).collect();
        let operations: Vec<Option<&[u8]>> =
            rows.iter().map(|r| r.operation_digest.as_deref()).collect();
        let actors: Vec<Option<&str>> = rows.iter().map(|r| r.actor.as_deref()).collect();
        let details: Vec<Option<&str>> = rows.iter().map(|r| r.detail.as_deref()).collect();
        inner
            .query(
                "logging answers",
                &inner.sql.append_many,
                &[
                    &namespaces,
                    &keys,
                    &fences,
                    &events,
                    &run_ids,
                    &triggers,
                    &attempts,
                    &hosts,
                    &pids,
                    &times,
                    &policies,
                    &operations,
                    &actors,
                    &details,
                ],
            )
            .await?;
        Ok(())
    }

    async fn read_attempts(&self, filter: &AttemptFilter) -> Result<Vec<AttemptEntry>, StoreError> {
        let inner = &self.inner;
        let int = |v: Option<u64>| v.map(|v| i64::try_from(v).unwrap_or(i64::MAX));
        // A key's timeline by the key alone (a key outside the filter's
        // namespace never reaches a backend).
        let (sql, namespace, key) = match &filter.key {
            Some(k) => (
                &inner.sql.attempts_by_key,
                Some(k.namespace.as_str()),
                Some(k.digest.0.to_vec()),
            ),
            None => (&inner.sql.attempts, filter.namespace.as_deref(), None),
        };
        let (since, until, after) = (
            int(filter.since_ms),
            int(filter.until_ms),
            int(filter.after_id),
        );
        let limit = filter.limit.map(i64::from);
        let rows = inner
            .query(
                "reading the attempt log",
                sql,
                &[&namespace, &key, &since, &until, &after, &limit],
            )
            .await?;
        rows.iter()
            .map(|row| codec::decode_attempt(row, &inner.name))
            .collect()
    }
}
