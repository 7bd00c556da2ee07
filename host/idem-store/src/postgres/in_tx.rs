//! An effect in the PostgreSQL store's own transaction: the caller's
//! writes to tables in the store's database and the holder's completion
//! commit in one transaction on one of the store's pooled connections.
//!
//! The transaction begins by locking the record's row (`SELECT … FOR
//! UPDATE`) and checking the fence, so a holder deposed before it began
//! runs nothing, and nobody can take the key over while it runs (a
//! take-over waits for the lock, then finds the record completed, or
//! still held by a holder whose transaction rolled back). The completion
//! is decided by `machine::finish` and written conditional on the fence,
//! its row count checked before `COMMIT`. `COMMIT` is sent only once the
//! completion answered, so a lost answer can only be COMMIT's own, and a
//! read-back that waits for the row lock (the old transaction is then
//! over, one way or the other) settles it.

use async_trait::async_trait;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;
use tokio_postgres::{IsolationLevel, Transaction};

use super::connection::{Conn, is_retryable};
use super::row::values;
use super::{Inner, PostgresStore};
use crate::codec::{AttemptRow, RecordRow, attempt_values};
use crate::execute::in_tx::{self, NoFences};
use crate::machine;
use crate::port::{Database, Transactions};
use crate::vocabulary::{
    EffectError, Outcome, Record, RecordKey, StoreError, TxEnd, is_our_completion, statement_failed,
};

/// What this file's calls are, for error messages.
const CONTEXT: &str = "running an effect in the store's transaction";

#[async_trait]
impl Transactions for PostgresStore {
    async fn database(&self) -> Result<Database, StoreError> {
        Ok(Database::Postgres(self.clone()))
    }
}

/// One try of an effect's transaction.
enum Try {
    /// Committed, or the effect failed (rolled back).
    Ended(TxEnd),
    /// The holder may not write (rolled back): the refusal, to log.
    Refused(StoreError),
    /// Changed nothing (a serialization failure or deadlock, or a lost
    /// `COMMIT` answer read back as not committed): run it all again.
    Again,
}

impl PostgresStore {
    /// Runs `effect` in one transaction on a connection of the store's
    /// pool (`isolation`: the server's default when `None`), handed the
    /// transaction and `context` (whatever the caller passes through, such
    /// as the engine's claim context: handing it as an argument rather than
    /// capturing it in a wrapping closure keeps the caller's future `Send`),
    /// and, when it
    /// returns an outcome, completes the attempt holding `fence` on `key`
    /// with it in the same transaction, then commits: the effect's writes
    /// (tables in the store's database) and the record's end are durable
    /// together or not at all.
    ///
    /// - The record's row is locked and the fence checked before `effect`
    ///   runs; the completion is conditional on the fence. A deposed
    ///   holder, a final record or a record gone is refused
    ///   ([`StoreError::Fenced`], [`StoreError::NotInProgress`],
    ///   [`StoreError::Gone`]): the transaction rolls back with every
    ///   business write, and the refused write is logged on its own.
    /// - A serialization failure or deadlock (SQLSTATE 40001, 40P01),
    ///   raised by the effect's statements or idem's, rolls back and runs
    ///   the whole transaction again, `effect` included (a few times);
    ///   it is never recorded as the effect's failure.
    /// - `effect` failing otherwise rolls back and records nothing: the
    ///   answer is [`TxEnd::Failed`], for the holder to record under its
    ///   fence (a statement's failure is retryable).
    /// - A `COMMIT` whose answer was lost is read back, never sent again:
    ///   the completion under this fence, with this outcome, is proof it
    ///   committed; the record still held under this fence proves it did
    ///   not (the transaction is run again); a read-back that fails is the
    ///   error.
    ///
    /// `effect` must not end the transaction, nor catch an error of its own
    /// statements and go on (the transaction is then aborted, and it is
    /// recorded as the effect's failure).
    pub async fn complete_in_transaction<C, F>(
        &self,
        key: &RecordKey,
        fence: u64,
        isolation: Option<IsolationLevel>,
        context: &C,
        mut effect: F,
    ) -> Result<TxEnd, StoreError>
    where
        C: ?Sized,
        F: AsyncFnMut(&Transaction<'_>, &C) -> Result<Outcome, EffectError<tokio_postgres::Error>>,
    {
        let inner = &self.inner;
        let mut retries = inner.retries(CONTEXT, "serialization failures or lost commits");
        loop {
            match inner
                .effect_once(key, fence, isolation, context, &mut effect)
                .await?
            {
                Try::Ended(end) => return Ok(end),
                Try::Refused(refused) => {
                    return Err(in_tx::log_refused(self, key, fence, refused).await);
                }
                Try::Again => retries.again()?,
            }
        }
    }
}

impl Inner {
    /// One try (see [`PostgresStore::complete_in_transaction`]).
    async fn effect_once<C, F>(
        &self,
        key: &RecordKey,
        fence: u64,
        isolation: Option<IsolationLevel>,
        context: &C,
        effect: &mut F,
    ) -> Result<Try, StoreError>
    where
        C: ?Sized,
        F: AsyncFnMut(&Transaction<'_>, &C) -> Result<Outcome, EffectError<tokio_postgres::Error>>,
    {
        let fail = |e| self.err(CONTEXT, e);
        let (manual, offset) = self.clock();
        let key_bytes = key.digest.0.to_vec();
        let mut conn = self.conn().await?;
        let lock = conn.prepare_cached(&self.sql.lock).await.map_err(fail)?;
        let now = conn.prepare_cached(&self.sql.now).await.map_err(fail)?;
        let logged = self.options.attempt_log;
        let update_sql = if logged {
            &self.sql.update_logged
        } else {
            &self.sql.update
        };
        let update = conn.prepare_cached(update_sql).await.map_err(fail)?;
        let key_params: [&(dyn ToSql + Sync); 2] = [&key.namespace, &key_bytes];
        let clock_params: [&(dyn ToSql + Sync); 2] = [&manual, &offset];
        // Until COMMIT or ROLLBACK answers, a dropped `conn` is discarded
        // (the server rolls back), never returned to the pool mid-transaction.
        conn.in_transaction = true;
        let client: &mut tokio_postgres::Client = &mut conn;
        let mut builder = client.build_transaction();
        if let Some(level) = isolation {
            builder = builder.isolation_level(level);
        }
        let tx = match builder.start().await {
            Ok(tx) => tx,
            Err(e) if is_retryable(&e) => return Ok(Try::Again),
            Err(e) => return Err(fail(e)),
        };

        // 1. The record's row, locked to the end, and the fence checked.
        let read = async {
            let row = tx.query_opt(&lock, &key_params).await?;
            let clock = tx.query_one(&now, &clock_params).await?;
            Ok((row, clock))
        };
        let (row, clock) = match read.await {
            Ok(read) => read,
            Err(e) if is_retryable(&e) => return Ok(Try::Again),
            Err(e) => return Err(fail(e)),
        };
        let current = row
            .map(|row| self.decode_prefixed(&row, ""))
            .transpose()?
            .flatten();
        let now_ms = self.unsigned(clock.get::<_, i64>(0), "the clock")?;
        if let Err(refused) = machine::holding(current.clone(), key, fence, now_ms) {
            let rolled_back = tx.rollback().await;
            end(&mut conn, rolled_back);
            return Ok(Try::Refused(refused));
        }

        // 2. The effect.
        let outcome = match effect(&tx, context).await {
            Ok(outcome) => outcome,
            Err(EffectError::Database(e)) if is_retryable(&e) => {
                // Rolled back here, so the connection goes back to the pool.
                let rolled_back = tx.rollback().await;
                end(&mut conn, rolled_back);
                return Ok(Try::Again);
            }
            Err(failed) => {
                let ended = match failed {
                    EffectError::Failed { retryable, outcome } => {
                        TxEnd::Failed { retryable, outcome }
                    }
                    EffectError::Database(e) => statement_failed(statement_text(&e)),
                };
                let rolled_back = tx.rollback().await;
                end(&mut conn, rolled_back);
                return Ok(Try::Ended(ended));
            }
        };

        // 3. The completion, decided as every end is, under the lock.
        let limit = self.options.max_outcome_bytes;
        let sent = machine::checked_outcome(key, outcome, limit)?;
        let clock = match tx.query_one(&now, &clock_params).await {
            Ok(clock) => clock,
            Err(e) => return self.after_effect(e),
        };
        let now_ms = self.unsigned(clock.get::<_, i64>(0), "the clock")?;
        let mut decide = in_tx::completion(key, fence, sent.clone(), limit);
        let step = match decide(current, now_ms, &mut NoFences) {
            Ok(step) => step,
            Err(refused) => {
                let rolled_back = tx.rollback().await;
                end(&mut conn, rolled_back);
                return Ok(Try::Refused(refused));
            }
        };
        let Some(record) = step.record else {
            // A refusal of `machine::finish` (a deposed fence, a final
            // record): the effect's writes go with the rollback.
            let rolled_back = tx.rollback().await;
            end(&mut conn, rolled_back);
            return match step.answer {
                Err(refused) => Ok(Try::Refused(refused)),
                Ok(()) => Err(self.corrupt("a completion that writes no record".into())),
            };
        };
        let row = RecordRow::of(&record)?;
        let written = self.write_completion(&tx, &update, &row, fence, step.entry, now_ms);
        match written.await {
            Ok(1) => {}
            Ok(n) => {
                let rolled_back = tx.rollback().await;
                end(&mut conn, rolled_back);
                return Err(self.corrupt(format!(
                    "the completion of {key} under fence {fence} changed {n} rows under its lock"
                )));
            }
            Err(e) => return self.after_effect(e),
        }

        // 4. COMMIT, sent only now: a lost answer is COMMIT's own.
        match tx.commit().await {
            Ok(()) => {
                conn.in_transaction = false;
                Ok(Try::Ended(TxEnd::Committed(sent)))
            }
            Err(e) if is_retryable(&e) => Ok(Try::Again),
            // The server answered: it did not commit.
            Err(e) if e.as_db_error().is_some() => Err(fail(e)),
            Err(lost) => {
                drop(conn);
                self.read_back(key, fence, &sent, lost).await
            }
        }
    }

    /// The completion's conditional write (and its log entry) inside the
    /// effect's transaction: how many rows it changed.
    pub(super) async fn write_completion(
        &self,
        tx: &Transaction<'_>,
        update: &tokio_postgres::Statement,
        row: &RecordRow,
        fence: u64,
        entry: Option<crate::vocabulary::AttemptEntry>,
        now_ms: u64,
    ) -> Result<u64, tokio_postgres::Error> {
        let expected = i64::try_from(fence).unwrap_or(i64::MAX);
        let entry = entry
            .filter(|_| self.options.attempt_log)
            .map(|e| AttemptRow::of(&e, now_ms));
        let mut params: Vec<&(dyn ToSql + Sync)> = values(row).to_vec();
        params.push(&expected);
        if let Some(entry) = &entry {
            params.extend(attempt_values!(entry, dyn ToSql + Sync));
        }
        tx.execute(update, &params).await
    }

    /// An error of idem's own statement after the effect ran: a conflict
    /// runs it all again; a transaction the effect left aborted (it caught
    /// an error of its own statement and went on) is the effect's failure;
    /// anything else the store's (nothing committed: the connection is
    /// discarded, the server rolls back).
    fn after_effect(&self, e: tokio_postgres::Error) -> Result<Try, StoreError> {
        if is_retryable(&e) {
            return Ok(Try::Again);
        }
        if e.code() == Some(&SqlState::IN_FAILED_SQL_TRANSACTION) {
            return Ok(Try::Ended(statement_failed(
                "a statement of the effect failed and the effect went on; \
                 the transaction was aborted and rolled back"
                    .into(),
            )));
        }
        Err(self.err(CONTEXT, e))
    }

    /// Settles a `COMMIT` whose answer was lost by reading the record back
    /// under its row lock, which waits until the old transaction is over
    /// (the server commits it or rolls it back when the connection goes):
    /// this completion there is proof it committed; the record still held
    /// under `fence` proves it did not, and the whole transaction is run
    /// again ([`Try::Again`]); a read-back that fails leaves the outcome
    /// unknown, and says so.
    async fn read_back(
        &self,
        key: &RecordKey,
        fence: u64,
        sent: &Outcome,
        lost: tokio_postgres::Error,
    ) -> Result<Try, StoreError> {
        let unknown = |why: String| StoreError::Backend {
            store: self.name.clone(),
            context: CONTEXT,
            cause: crate::vocabulary::cause(format!(
                "the answer to COMMIT was lost ({lost}) and reading the record back {why}: \
                 whether the effect committed is unknown"
            )),
        };
        let record = match self.locked_read(key).await {
            Ok(record) => record,
            Err(e) => return Err(unknown(format!("failed ({e})"))),
        };
        match record {
            Some(r) if is_our_completion(&r, fence, sent) => {
                Ok(Try::Ended(TxEnd::Committed(sent.clone())))
            }
            // Anything else is no completion of ours, so the commit failed:
            // still held under this fence, the next try runs it all again;
            // otherwise its fence check says why it may not.
            Some(_) | None => Ok(Try::Again),
        }
    }

    /// The record under `key`, read under its row lock (`FOR UPDATE`, in
    /// a transaction rolled back at once): waits for any transaction that
    /// holds the lock to end.
    pub(super) async fn locked_read(&self, key: &RecordKey) -> Result<Option<Record>, StoreError> {
        let fail = |e| self.err("reading back a lost commit", e);
        let key_bytes = key.digest.0.to_vec();
        let mut conn = self.conn().await?;
        let lock = conn.prepare_cached(&self.sql.lock).await.map_err(fail)?;
        conn.in_transaction = true;
        let client: &mut tokio_postgres::Client = &mut conn;
        let tx = client.transaction().await.map_err(fail)?;
        let row = tx
            .query_opt(&lock, &[&key.namespace, &key_bytes])
            .await
            .map_err(fail)?;
        let record = row
            .map(|row| self.decode_prefixed(&row, ""))
            .transpose()?
            .flatten();
        let rolled_back = tx.rollback().await;
        end(&mut conn, rolled_back);
        Ok(record)
    }
}

/// Marks the connection free for the pool once ROLLBACK answered; one
/// whose ROLLBACK failed is discarded when dropped (the server rolls back).
pub(super) fn end(conn: &mut Conn, rolled_back: Result<(), tokio_postgres::Error>) {
    if rolled_back.is_ok() {
        conn.in_transaction = false;
    }
}

/// A statement's failure as a person reads it: the server's message and
/// SQLSTATE when it has one.
fn statement_text(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{} (SQLSTATE {})", db.message(), db.code().code()),
        None => e.to_string(),
    }
}
