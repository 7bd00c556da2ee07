//! The gate a downstream keeps, in a SQLite file: its entries
//! (`gate_entries`, migration 8), each call one `BEGIN IMMEDIATE`
//! transaction, and the form whose admission, the downstream's writes and
//! the result commit in one transaction of the store's file.

use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, Transaction, TransactionBehavior, params};

use super::connection::{Inner, SqliteStore};
use super::row::int;
use crate::backend::{GateBackend, GateDecide};
use crate::machine::gate;
use crate::vocabulary::{
    Admission, GateEntry, GateRequest, GateRun, GateState, GateTicket, StoreError,
};

/// The columns of `gate_entries`, in the order [`Inner::save_gate`] binds
/// them.
const COLUMNS: &str = "gate, key, highest_fence, admission, admitted_fence, state, \
     in_flight_until, fingerprint, result, created_ms, updated_ms";

/// What this file's calls are, for error messages.
const CONTEXT: &str = "keeping the gate";

#[async_trait]
impl GateBackend for SqliteStore {
    async fn gate_transact<T: Send + 'static>(
        &self,
        gate: &str,
        key: &str,
        decide: GateDecide<T>,
    ) -> Result<T, StoreError> {
        let (gate, key) = (gate.to_string(), key.to_string());
        self.blocking(move |inner| {
            inner.write(CONTEXT, |tx, now| {
                let step = decide(inner.load_gate(tx, &gate, &key)?, now)?;
                if let Some(saved) = &step.save {
                    inner.save_gate(tx, saved)?;
                }
                Ok(step.answer)
            })
        })
        .await
    }

    async fn gate_read(&self, gate: &str, key: &str) -> Result<Option<GateEntry>, StoreError> {
        let (gate, key) = (gate.to_string(), key.to_string());
        self.blocking(move |inner| inner.read(|conn, _now| inner.load_gate(conn, &gate, &key)))
            .await
    }

    async fn gate_forget(&self, gate: &str, before_ms: u64) -> Result<u64, StoreError> {
        let gate = gate.to_string();
        self.blocking(move |inner| {
            inner.write(CONTEXT, |tx, _now| {
                let n = tx
                    .execute(
                        "DELETE FROM gate_entries WHERE gate = ?1 AND updated_ms < ?2 \
                         AND state <> 'in-flight'",
                        params![gate, int(before_ms)],
                    )
                    .map_err(|e| inner.err(CONTEXT, e))?;
                Ok(n as u64)
            })
        })
        .await
    }
}

impl SqliteStore {
    /// Runs `effect` behind the gate inside one `BEGIN IMMEDIATE`
    /// transaction of the store's file: the admission of `request`, the
    /// effect's writes (tables beside idem's, in the same file) and its
    /// result commit together, or nothing does.
    ///
    /// - Not admitted (a replay, a stale fence, another admission in
    ///   flight, another request under the key): the effect does not run;
    ///   the answer is [`GateRun::NotAdmitted`] (a higher fence seen is
    ///   still remembered).
    /// - Admitted: `effect` runs with the transaction and the ticket; the
    ///   bytes it returns are stored as the key's result, in the same
    ///   transaction, and committed with its writes: [`GateRun::Applied`].
    ///   A repeat of the key is then replayed those bytes.
    /// - `effect` failing rolls everything back, the admission included:
    ///   [`GateRun::Failed`], and the key is as it was.
    ///
    /// The write lock is held from the admission to the commit, so no other
    /// holder of the key (no other thread or process on the file) can be
    /// admitted meanwhile: unlike the gate's separate calls, a deposed
    /// holder's writes cannot land beside its successor's, and a crash
    /// before the commit leaves nothing behind. A failed `COMMIT` is read
    /// back (this admission's result stored is proof it committed).
    ///
    /// As with [`SqliteStore::complete_in_transaction`], `effect` must
    /// leave the transaction open, must not call this store, and should be
    /// short: every other write of the store waits for it.
    pub async fn gate_in_transaction<F, E>(
        &self,
        request: GateRequest,
        effect: F,
    ) -> Result<GateRun<E>, StoreError>
    where
        F: FnOnce(&Transaction<'_>, &GateTicket) -> Result<Vec<u8>, E> + Send + 'static,
        E: Send + 'static,
    {
        gate::check_request(&request.gate, &request.key, request.fence)?;
        self.blocking(move |inner| inner.gate_in_tx(&request, effect))
            .await
    }
}

impl Inner {
    /// One gated effect's transaction (see
    /// [`SqliteStore::gate_in_transaction`]).
    fn gate_in_tx<F, E>(&self, request: &GateRequest, effect: F) -> Result<GateRun<E>, StoreError>
    where
        F: FnOnce(&Transaction<'_>, &GateTicket) -> Result<Vec<u8>, E>,
    {
        self.with_connection(CONTEXT, |conn| {
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(|e| self.err(CONTEXT, e))?;
            let now = self.options.clock.now_ms();
            let entry = self.load_gate(&tx, &request.gate, &request.key)?;
            let step = gate::admit(entry, request, now);
            let ticket = match step.answer {
                Admission::Admitted { ticket, .. } => ticket,
                other => {
                    if let Some(saved) = &step.save {
                        self.save_gate(&tx, saved)?;
                        tx.commit().map_err(|e| self.err(CONTEXT, e))?;
                    }
                    return Ok(GateRun::NotAdmitted(other));
                }
            };
            let result = match effect(&tx, &ticket) {
                Ok(result) => result,
                Err(failed) => {
                    // Dropping the transaction rolls back what is left.
                    let _ = tx.rollback();
                    return Ok(GateRun::Failed(failed));
                }
            };
            if tx.is_autocommit() {
                return Err(StoreError::InvalidRequest(format!(
                    "the effect behind gate `{}` ended the store's transaction itself; \
                     what it committed stays committed, and its result was not stored",
                    request.gate
                )));
            }
            let now = self.options.clock.now_ms();
            let done = gate::record(step.save, &ticket, result.clone(), now)?;
            self.save_gate(&tx, &done)?;
            match tx.commit() {
                Ok(()) => Ok(GateRun::Applied(result)),
                Err(e) => self.gate_read_back(conn, &ticket, result, e),
            }
        })
    }

    /// After a `COMMIT` that failed: committed after all if the entry is
    /// this admission's, done with this result; the failure otherwise.
    fn gate_read_back<E>(
        &self,
        conn: &Connection,
        ticket: &GateTicket,
        result: Vec<u8>,
        failed: rusqlite::Error,
    ) -> Result<GateRun<E>, StoreError> {
        match self.load_gate(conn, &ticket.gate, &ticket.key) {
            Ok(Some(e))
                if e.state == GateState::Done
                    && e.admission == ticket.admission
                    && e.result.as_ref() == Some(&result) =>
            {
                Ok(GateRun::Applied(result))
            }
            _ => Err(self.err(CONTEXT, failed)),
        }
    }

    /// The entry of `(gate, key)`, inside the caller's transaction or read.
    fn load_gate(
        &self,
        conn: &Connection,
        gate: &str,
        key: &str,
    ) -> Result<Option<GateEntry>, StoreError> {
        let sql = format!("SELECT {COLUMNS} FROM gate_entries WHERE gate = ?1 AND key = ?2");
        let row = conn
            .query_row(&sql, params![gate, key], |row| {
                Ok((
                    row.get::<_, i64>(2)?,
                    row.get::<_, i64>(3)?,
                    row.get::<_, i64>(4)?,
                    row.get::<_, String>(5)?,
                    row.get::<_, i64>(6)?,
                    row.get::<_, Option<Vec<u8>>>(7)?,
                    row.get::<_, Option<Vec<u8>>>(8)?,
                    row.get::<_, i64>(9)?,
                    row.get::<_, i64>(10)?,
                ))
            })
            .optional()
            .map_err(|e| self.err(CONTEXT, e))?;
        let Some((highest, admission, admitted, state, until, fp, result, created, updated)) = row
        else {
            return Ok(None);
        };
        let unsigned = |v: i64, what: &str| {
            u64::try_from(v).map_err(|_| self.corrupt(format!("the gate entry's {what} is {v}")))
        };
        Ok(Some(GateEntry {
            gate: gate.to_string(),
            key: key.to_string(),
            highest_fence: unsigned(highest, "highest fence")?,
            admission: unsigned(admission, "admission")?,
            admitted_fence: unsigned(admitted, "admitted fence")?,
            state: GateState::parse(&state)
                .ok_or_else(|| self.corrupt(format!("the gate entry's state is `{state}`")))?,
            in_flight_until_ms: unsigned(until, "window")?,
            fingerprint: fp,
            result,
            created_ms: unsigned(created, "creation time")?,
            updated_ms: unsigned(updated, "update time")?,
        }))
    }

    /// Saves `e` (inserted or replaced whole) inside the caller's
    /// transaction.
    fn save_gate(&self, tx: &Transaction<'_>, e: &GateEntry) -> Result<(), StoreError> {
        let sql = format!(
            "INSERT OR REPLACE INTO gate_entries ({COLUMNS}) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)"
        );
        tx.execute(
            &sql,
            params![
                e.gate,
                e.key,
                int(e.highest_fence),
                int(e.admission),
                int(e.admitted_fence),
                e.state.as_str(),
                int(e.in_flight_until_ms),
                e.fingerprint,
                e.result,
                int(e.created_ms),
                int(e.updated_ms),
            ],
        )
        .map_err(|e| self.err(CONTEXT, e))?;
        Ok(())
    }
}
