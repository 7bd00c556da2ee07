//! The gate a downstream keeps, in PostgreSQL: its entries
//! (`gate_entries`, migration 7), each call one transaction holding the
//! entry's row lock, and the caller-owned form whose admission, the
//! downstream's writes and the result commit in the caller's transaction.
//!
//! A key never seen has no row to lock: each call first inserts a
//! placeholder (`ON CONFLICT DO NOTHING`: a concurrent caller waits on the
//! primary key until the first commits, then finds its row), locks the row
//! `FOR UPDATE`, and reads the store clock after the lock is held. A
//! placeholder (admission 0, which no admitted entry has) reads as absent
//! and is never committed as such: every decision on an absent entry
//! saves one, and a refusal rolls back.

use async_trait::async_trait;
use tokio_postgres::Transaction;
use tokio_postgres::types::ToSql;

use super::connection::Attempt;
use super::{FENCED_SQLSTATE, Inner, PostgresStore};
use crate::backend::{GateBackend, GateDecide};
use crate::machine::gate;
use crate::vocabulary::{Admission, GateEntry, GateRequest, GateState, GateTicket, StoreError};

/// The columns of `gate_entries`, in the order [`save`] binds them.
const COLUMNS: &str = "gate, key, highest_fence, admission, admitted_fence, state, \
     in_flight_until, fingerprint, result, created_ms, updated_ms";

/// What this file's calls are, for error messages.
const CONTEXT: &str = "keeping the gate";

/// A stored time or count as a SQL integer.
fn int(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

impl Inner {
    /// The schema's quoted name, for this file's statements.
    fn gate_table(&self) -> String {
        format!("{}.gate_entries", super::sql::quote(&self.url.schema))
    }

    /// Locks `(gate, key)`'s entry in `tx` (a placeholder first when there
    /// is none), reads the clock under the lock, decides, saves.
    async fn gate_on<T>(
        &self,
        tx: &Transaction<'_>,
        gate: &str,
        key: &str,
        decide: &GateDecide<T>,
    ) -> Result<Result<T, StoreError>, tokio_postgres::Error> {
        let table = self.gate_table();
        let placeholder = format!(
            "INSERT INTO {table} ({COLUMNS}) VALUES ($1, $2, 0, 0, 0, 'free', 0, NULL, NULL, 0, 0) \
             ON CONFLICT (gate, key) DO NOTHING"
        );
        tx.execute(&placeholder, &[&gate, &key]).await?;
        let lock = format!("SELECT {COLUMNS} FROM {table} WHERE gate = $1 AND key = $2 FOR UPDATE");
        let row = tx.query_one(&lock, &[&gate, &key]).await?;
        let (manual, offset) = self.clock();
        let clock = tx.query_one(&self.sql.now, &[&manual, &offset]).await?;
        let decided = self
            .unsigned(clock.get::<_, i64>(0), "the clock")
            .and_then(|now| Ok((self.gate_row(&row)?, now)))
            .and_then(|(entry, now)| decide(entry, now));
        let step = match decided {
            Ok(step) => step,
            Err(refused) => return Ok(Err(refused)),
        };
        if let Some(saved) = &step.save {
            save(tx, &table, saved).await?;
        }
        Ok(Ok(step.answer))
    }

    /// A locked row as an entry; a placeholder as none.
    fn gate_row(&self, row: &tokio_postgres::Row) -> Result<Option<GateEntry>, StoreError> {
        let unsigned = |i: usize, what: &str| self.unsigned(row.get::<_, i64>(i), what);
        let admission = unsigned(3, "a gate admission")?;
        if admission == 0 {
            return Ok(None);
        }
        let state: String = row.get(5);
        Ok(Some(GateEntry {
            gate: row.get(0),
            key: row.get(1),
            highest_fence: unsigned(2, "a gate's highest fence")?,
            admission,
            admitted_fence: unsigned(4, "a gate's admitted fence")?,
            state: GateState::parse(&state)
                .ok_or_else(|| self.corrupt(format!("a gate entry's state is `{state}`")))?,
            in_flight_until_ms: unsigned(6, "a gate's window")?,
            fingerprint: row.get(7),
            result: row.get(8),
            created_ms: unsigned(9, "a gate entry's creation time")?,
            updated_ms: unsigned(10, "a gate entry's update time")?,
        }))
    }
}

/// Writes `e` over the locked row.
async fn save(
    tx: &Transaction<'_>,
    table: &str,
    e: &GateEntry,
) -> Result<(), tokio_postgres::Error> {
    let sql = format!(
        "UPDATE {table} SET highest_fence = $3, admission = $4, admitted_fence = $5, state = $6, \
         in_flight_until = $7, fingerprint = $8, result = $9, created_ms = $10, updated_ms = $11 \
         WHERE gate = $1 AND key = $2"
    );
    let values: [&(dyn ToSql + Sync); 11] = [
        &e.gate,
        &e.key,
        &int(e.highest_fence),
        &int(e.admission),
        &int(e.admitted_fence),
        &e.state.as_str(),
        &int(e.in_flight_until_ms),
        &e.fingerprint,
        &e.result,
        &int(e.created_ms),
        &int(e.updated_ms),
    ];
    tx.execute(&sql, &values).await.map(|_| ())
}

#[async_trait]
impl GateBackend for PostgresStore {
    async fn gate_transact<T: Send + 'static>(
        &self,
        gate: &str,
        key: &str,
        decide: GateDecide<T>,
    ) -> Result<T, StoreError> {
        let inner = &self.inner;
        // A serialization failure or deadlock (a server run SERIALIZABLE)
        // changed nothing: the whole call is tried again.
        let mut retries = inner.retries(CONTEXT, "serialization failures");
        loop {
            let mut conn = inner.conn().await?;
            conn.in_transaction = true;
            let tx = conn
                .transaction()
                .await
                .map_err(|e| inner.err(CONTEXT, e))?;
            let decided = inner.gate_on(&tx, gate, key, &decide).await;
            let answer = match inner.settle(CONTEXT, decided)? {
                Attempt::Again => {
                    retries.again()?;
                    continue;
                }
                Attempt::Done(Err(refused)) => {
                    let _ = tx.rollback().await;
                    conn.in_transaction = false;
                    return Err(refused);
                }
                Attempt::Done(Ok(answer)) => answer,
            };
            match inner.settle(CONTEXT, tx.commit().await)? {
                Attempt::Done(()) => {
                    conn.in_transaction = false;
                    return Ok(answer);
                }
                Attempt::Again => retries.again()?,
            }
        }
    }

    async fn gate_read(&self, gate: &str, key: &str) -> Result<Option<GateEntry>, StoreError> {
        let inner = &self.inner;
        let sql = format!(
            "SELECT {COLUMNS} FROM {} WHERE gate = $1 AND key = $2",
            inner.gate_table()
        );
        let rows = inner.query(CONTEXT, &sql, &[&gate, &key]).await?;
        match rows.first() {
            Some(row) => inner.gate_row(row),
            None => Ok(None),
        }
    }

    async fn gate_forget(&self, gate: &str, before_ms: u64) -> Result<u64, StoreError> {
        let inner = &self.inner;
        let sql = format!(
            "WITH gone AS (DELETE FROM {} WHERE gate = $1 AND updated_ms < $2 \
             AND state <> 'in-flight' AND admission > 0 RETURNING 1) SELECT count(*) FROM gone",
            inner.gate_table()
        );
        let rows = inner
            .query(CONTEXT, &sql, &[&gate, &int(before_ms)])
            .await?;
        let n: i64 = rows.first().map_or(0, |r| r.get(0));
        inner.unsigned(n, "a count")
    }
}

impl PostgresStore {
    /// The gate's answer to `request` inside the caller's transaction `tx`
    /// (on this store's database; the caller commits it): the form whose
    /// admission, the downstream's own writes and the result commit
    /// together. The entry's row stays locked until `tx` ends, so no other
    /// holder of the key is admitted meanwhile, and a crash or a rollback
    /// before the commit leaves the key as it was.
    ///
    /// On [`Admission::Admitted`], write the business rows in `tx`, then
    /// [`PostgresStore::gate_record_in`] the result, then commit. On any
    /// other answer apply nothing (committing `tx` keeps a higher fence
    /// seen; rolling it back is as safe).
    ///
    /// A failure of the gate's statements leaves `tx` aborted (PostgreSQL
    /// aborts a transaction on any error): roll it back.
    pub async fn gate_admit_in(
        &self,
        tx: &Transaction<'_>,
        request: &GateRequest,
    ) -> Result<Admission, StoreError> {
        gate::check_request(&request.gate, &request.key, request.fence)?;
        let asked = request.clone();
        let decide: GateDecide<Admission> =
            Box::new(move |entry, now| Ok(gate::admit(entry, &asked, now)));
        let inner = &self.inner;
        inner
            .gate_on(tx, &request.gate, &request.key, &decide)
            .await
            .map_err(|e| inner.err(CONTEXT, e))?
    }

    /// Stores `result` for the admission `ticket` holds, inside the
    /// caller's transaction (the one [`PostgresStore::gate_admit_in`]
    /// admitted it in). A ticket that does not hold its key
    /// ([`StoreError::GateRefused`]) also *aborts* `tx`, by raising
    /// [`FENCED_SQLSTATE`] in it: a caller that ignored the error and
    /// committed gets a rollback, never its writes without the result.
    pub async fn gate_record_in(
        &self,
        tx: &Transaction<'_>,
        ticket: &GateTicket,
        result: Vec<u8>,
    ) -> Result<(), StoreError> {
        gate::check_request(&ticket.gate, &ticket.key, ticket.fence)?;
        let held = ticket.clone();
        let decide: GateDecide<()> = Box::new(move |entry, now| {
            let saved = gate::record(entry, &held, result.clone(), now)?;
            Ok(gate::GateStep {
                save: Some(saved),
                answer: (),
            })
        });
        let inner = &self.inner;
        match inner
            .gate_on(tx, &ticket.gate, &ticket.key, &decide)
            .await
            .map_err(|e| inner.err(CONTEXT, e))?
        {
            Ok(()) => Ok(()),
            Err(refused) => {
                let _ = abort(tx, ticket).await;
                Err(refused)
            }
        }
    }
}

/// Aborts the caller's transaction by raising [`FENCED_SQLSTATE`] in it.
async fn abort(tx: &Transaction<'_>, ticket: &GateTicket) -> Result<(), tokio_postgres::Error> {
    // Only numbers go into the text: nothing to quote.
    let sql = format!(
        "DO $idem$ BEGIN RAISE EXCEPTION 'idem: the gate refused the result of fence {} (admission {}); this transaction cannot commit' USING ERRCODE = '{FENCED_SQLSTATE}'; END $idem$",
        ticket.fence, ticket.admission
    );
    tx.batch_execute(&sql).await
}
