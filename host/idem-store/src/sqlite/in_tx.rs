//! An effect in the SQLite store's own transaction: the caller's writes
//! to tables in the store's file and the holder's completion commit in one
//! `BEGIN IMMEDIATE` transaction on the store's one connection.
//!
//! The write lock is held from `BEGIN IMMEDIATE` to `COMMIT`, so nobody —
//! no other thread, no other process on the file — can take the key over
//! while the effect runs: the fence checked before the effect is the fence
//! the completion is written under, and the completion is decided by
//! `machine::finish` as every other end is. A `rusqlite::Transaction` is
//! not `Send`, so the effect is a plain (synchronous) closure run on the
//! thread that holds the connection; it should be short, since every other
//! write of the store waits for it (network calls belong before it).

use async_trait::async_trait;
use rusqlite::{Connection, Transaction, TransactionBehavior};

use super::connection::{Inner, SqliteStore};
use crate::execute::in_tx::{self, NoFences};
use crate::machine;
use crate::port::{Database, Transactions};
use crate::vocabulary::{
    EffectError, Outcome, RecordKey, StoreError, TxEnd, is_our_completion, statement_failed,
};

/// What one effect's transaction came to, before a refusal is logged.
enum Ran {
    /// Committed, or the effect failed (rolled back).
    Ended(TxEnd),
    /// The holder was deposed (or the record is final or gone): rolled
    /// back, the refusal still to be logged.
    Refused(StoreError),
}

#[async_trait]
impl Transactions for SqliteStore {
    async fn database(&self) -> Result<Database, StoreError> {
        Ok(Database::Sqlite(self.clone()))
    }
}

impl SqliteStore {
    /// Runs `effect` inside one `BEGIN IMMEDIATE` transaction of the
    /// store's file and, when it returns an outcome, completes the attempt
    /// holding `fence` on `key` with that outcome in the same transaction,
    /// then commits: the effect's writes and the record's end are durable
    /// together or not at all.
    ///
    /// - The fence is checked before `effect` runs (a holder deposed before
    ///   its transaction began runs nothing) and the completion is
    ///   conditional on it: a deposed holder, a final record or a record
    ///   gone is refused ([`StoreError::Fenced`], [`StoreError::NotInProgress`],
    ///   [`StoreError::Gone`]), the transaction rolls back with every
    ///   business write, and the refused write is logged in a transaction
    ///   of its own.
    /// - `effect` failing ([`EffectError`]) rolls its writes back and
    ///   records nothing: the answer is [`TxEnd::Failed`], for the holder to
    ///   record under its fence (a statement's failure is retryable).
    /// - A failed `COMMIT` is read back: the completion under this fence,
    ///   with this outcome, is proof that it committed; anything else is
    ///   the error.
    ///
    /// `effect` must leave the transaction open (no `COMMIT`, `ROLLBACK`
    /// or `RELEASE` of it): one that ends it is refused, and what it
    /// committed stays committed without the completion. It must not call
    /// this store (or an engine over it) either: it runs holding the
    /// store's one connection, which such a call would wait for forever.
    /// It is `Send + 'static` because it may run on the blocking pool:
    /// move what it needs into it.
    pub async fn complete_in_transaction<F>(
        &self,
        key: &RecordKey,
        fence: u64,
        effect: F,
    ) -> Result<TxEnd, StoreError>
    where
        F: FnOnce(&Transaction<'_>) -> Result<Outcome, EffectError<rusqlite::Error>>
            + Send
            + 'static,
    {
        let k = key.clone();
        let ran = self
            .blocking(move |inner| inner.effect_in_tx(&k, fence, effect))
            .await?;
        match ran {
            Ran::Ended(end) => Ok(end),
            Ran::Refused(refused) => Err(in_tx::log_refused(self, key, fence, refused).await),
        }
    }
}

/// What this file's calls are, for error messages.
const CONTEXT: &str = "running an effect in the store's transaction";

impl Inner {
    /// One effect's transaction on the store's connection (see
    /// [`SqliteStore::complete_in_transaction`]).
    fn effect_in_tx<F>(&self, key: &RecordKey, fence: u64, effect: F) -> Result<Ran, StoreError>
    where
        F: FnOnce(&Transaction<'_>) -> Result<Outcome, EffectError<rusqlite::Error>>,
    {
        self.with_connection(CONTEXT, |conn| {
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(|e| self.err(CONTEXT, e))?;
            // Read under the write lock, as every write of this store is.
            let now = self.options.clock.now_ms();
            // The holder deposed before its transaction began runs nothing.
            if let Err(refused) = machine::holding(self.load(&tx, key)?, key, fence, now) {
                // Dropping the transaction rolls it back; nothing was written.
                return Ok(Ran::Refused(refused));
            }
            let outcome = match effect(&tx) {
                Ok(outcome) => outcome,
                Err(failed) => {
                    let end = match failed {
                        EffectError::Failed { retryable, outcome } => {
                            TxEnd::Failed { retryable, outcome }
                        }
                        EffectError::Database(e) => statement_failed(e.to_string()),
                    };
                    rollback(tx);
                    return Ok(Ran::Ended(end));
                }
            };
            if tx.is_autocommit() {
                return Err(StoreError::InvalidRequest(format!(
                    "the effect for {key} ended the store's transaction itself; \
                     what it committed stays committed, and its end was not recorded"
                )));
            }
            // The clock again: the effect may have taken a while, and the
            // end is stamped when it is written.
            let now = self.options.clock.now_ms();
            // The outcome as the store will keep it (cut and checked), to
            // recognise it if read back.
            let sent =
                machine::checked_outcome(key, outcome.clone(), self.options.max_outcome_bytes)?;
            let mut decide = in_tx::completion(key, fence, outcome, self.options.max_outcome_bytes);
            let call = in_tx::completion_call(key);
            match self.transact_in(&tx, now, &call, &mut decide, &mut NoFences)? {
                Ok(()) => {}
                Err(refused) => {
                    rollback(tx);
                    return Ok(Ran::Refused(refused));
                }
            }
            match tx.commit() {
                Ok(()) => Ok(Ran::Ended(TxEnd::Committed(sent))),
                Err(e) => self.read_back(conn, key, fence, &sent, e),
            }
        })
    }

    /// After a `COMMIT` that failed: committed after all if the record is
    /// this completion (read on the same connection, the transaction over
    /// either way: rusqlite rolls back one still open); the failure
    /// otherwise.
    fn read_back(
        &self,
        conn: &Connection,
        key: &RecordKey,
        fence: u64,
        sent: &Outcome,
        failed: rusqlite::Error,
    ) -> Result<Ran, StoreError> {
        match self.load(conn, key) {
            Ok(Some(record)) if is_our_completion(&record, fence, sent) => {
                Ok(Ran::Ended(TxEnd::Committed(sent.clone())))
            }
            _ => Err(self.err(CONTEXT, failed)),
        }
    }
}

/// Rolls back; a rollback that fails leaves nothing committed either (the
/// transaction is dropped, which rolls back again or finds it over).
fn rollback(tx: Transaction<'_>) {
    let _ = tx.rollback();
}
