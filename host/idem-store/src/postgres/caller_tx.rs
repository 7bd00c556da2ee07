//! A completion inside a transaction the caller owns: a service that
//! already holds a transaction on the store's PostgreSQL database (its own
//! pool, its own connection) writes its business rows, has idem complete
//! the attempt in that same transaction, and commits it itself.
//!
//! The record's row is locked, the fence checked and the completion
//! written conditional on it, inside the caller's transaction, so that the
//! check and the caller's `COMMIT` are atomic. A refusal (a deposed holder)
//! also *aborts* the caller's transaction, by raising [`FENCED_SQLSTATE`]
//! in it: a caller that ignored the error and committed anyway gets a
//! rollback, never its business writes without a completion ("returning
//! false is not enough", awa's ADR-042).
//!
//! The same completion exists as SQL functions in the store's schema
//! (migration 9, `migrations/postgres/009_complete_function.sql`), for a
//! service in another language: `complete(namespace, key, fence, status,
//! body)` raises [`FENCED_SQLSTATE`] on a refusal (its DETAIL one word:
//! `fenced`, `final` or `gone`) and [`INVALID_COMPLETION_SQLSTATE`] on a
//! request that cannot be right; `completed_under(…)` is
//! [`PostgresStore::completed_under`]'s question in SQL; `log_refused(…)`,
//! called after the caller's rollback, logs a deposed holder's refused
//! write as [`PostgresStore::complete_in`] logs it on its own.

use tokio_postgres::Transaction;
use tokio_postgres::types::ToSql;

use super::PostgresStore;
use crate::codec::RecordRow;
use crate::execute::in_tx::{self, NoFences};
use crate::machine;
use crate::vocabulary::{Outcome, RecordKey, StoreError, is_our_completion};

/// The SQLSTATE raised in a caller's transaction whose completion was
/// refused (the holder was deposed, the record is final or gone): the
/// transaction is aborted, so its `COMMIT` rolls back. Class `ID` is
/// implementation-defined (not one PostgreSQL uses); `F` for fenced.
pub const FENCED_SQLSTATE: &str = "IDF01";

/// The SQLSTATE the SQL function `complete` raises for a request that
/// cannot be right, checked before the record is read (a key that is not
/// 64 hexadecimal digits, a NULL argument, a body over
/// [`crate::DEFAULT_MAX_OUTCOME_BYTES`]); it too aborts the transaction.
pub const INVALID_COMPLETION_SQLSTATE: &str = "IDF02";

/// What this file's calls are, for error messages.
const CONTEXT: &str = "completing in the caller's transaction";

impl PostgresStore {
    /// Completes the attempt holding `fence` on `key` with `outcome`
    /// inside the caller's transaction `tx`, which must be on this store's
    /// database (the schema's tables are named as the store names them);
    /// the caller commits it. Answers the outcome as the store keeps it.
    ///
    /// The record's row stays locked until the caller's transaction ends,
    /// so nobody takes the key over in between: keep the rest of that
    /// transaction short. A refusal ([`StoreError::Fenced`],
    /// [`StoreError::NotInProgress`], [`StoreError::Gone`]) aborts `tx`
    /// (see [`FENCED_SQLSTATE`]) and is logged on its own. A failure of
    /// idem's statements leaves `tx` aborted too (PostgreSQL aborts a
    /// transaction on any error): roll it back.
    ///
    /// If the answer to the caller's `COMMIT` is lost, ask
    /// [`PostgresStore::completed_under`] rather than guessing or
    /// committing again.
    pub async fn complete_in(
        &self,
        tx: &Transaction<'_>,
        key: &RecordKey,
        fence: u64,
        outcome: Outcome,
    ) -> Result<Outcome, StoreError> {
        let inner = &self.inner;
        let fail = |e| inner.err(CONTEXT, e);
        let limit = inner.options.max_outcome_bytes;
        let sent = machine::checked_outcome(key, outcome, limit)?;
        let (manual, offset) = inner.clock();
        let key_bytes = key.digest.0.to_vec();
        let key_params: [&(dyn ToSql + Sync); 2] = [&key.namespace, &key_bytes];
        let clock_params: [&(dyn ToSql + Sync); 2] = [&manual, &offset];
        let lock = tx.prepare(&inner.sql.lock).await.map_err(fail)?;
        let row = tx.query_opt(&lock, &key_params).await.map_err(fail)?;
        let clock = tx
            .query_one(&inner.sql.now, &clock_params)
            .await
            .map_err(fail)?;
        let current = row
            .map(|row| inner.decode_prefixed(&row, ""))
            .transpose()?
            .flatten();
        let now_ms = inner.unsigned(clock.get::<_, i64>(0), "the clock")?;
        let mut decide = in_tx::completion(key, fence, sent.clone(), limit);
        let step = decide(current, now_ms, &mut NoFences);
        let (record, entry) = match step {
            Ok(step) => match (step.record, step.answer) {
                (Some(record), Ok(())) => (record, step.entry),
                (_, Err(refused)) => return Err(self.refuse(tx, key, fence, refused).await),
                (None, Ok(())) => {
                    return Err(inner.corrupt("a completion that writes no record".into()));
                }
            },
            Err(refused) => return Err(self.refuse(tx, key, fence, refused).await),
        };
        let update_sql = if inner.options.attempt_log {
            &inner.sql.update_logged
        } else {
            &inner.sql.update
        };
        let update = tx.prepare(update_sql).await.map_err(fail)?;
        let row = RecordRow::of(&record)?;
        match inner
            .write_completion(tx, &update, &row, fence, entry, now_ms)
            .await
            .map_err(fail)?
        {
            1 => Ok(sent),
            n => {
                let _ = abort(tx, key, fence).await;
                Err(inner.corrupt(format!(
                    "the completion of {key} under fence {fence} changed {n} rows under its lock"
                )))
            }
        }
    }

    /// Whether the completion of `key` under `fence` with `outcome` is
    /// committed: the question to ask when the answer to the caller's
    /// `COMMIT` was lost. Read under the record's row lock, so it waits
    /// until the caller's transaction is over on the server (committed, or
    /// rolled back when its connection went): `true` is proof it
    /// committed (nobody else writes under a fence), `false` that it did
    /// not. An error leaves it unknown: ask again.
    pub async fn completed_under(
        &self,
        key: &RecordKey,
        fence: u64,
        outcome: &Outcome,
    ) -> Result<bool, StoreError> {
        let limit = self.inner.options.max_outcome_bytes;
        let sent = machine::checked_outcome(key, outcome.clone(), limit)?;
        let record = self.inner.locked_read(key).await?;
        Ok(record.is_some_and(|r| is_our_completion(&r, fence, &sent)))
    }

    /// A refused completion: the caller's transaction aborted, the refusal
    /// logged on its own (after the caller's transaction, which holds the
    /// row lock, is over: the log write waits for it).
    async fn refuse(
        &self,
        tx: &Transaction<'_>,
        key: &RecordKey,
        fence: u64,
        refused: StoreError,
    ) -> StoreError {
        let _ = abort(tx, key, fence).await;
        let store = self.clone();
        let (key, logged) = (key.clone(), refused.clone());
        // The caller's transaction still holds the record's row lock: the
        // log write waits for it to end, so it runs beside the caller.
        tokio::spawn(async move {
            let _ = in_tx::log_refused(&store, &key, fence, logged).await;
        });
        refused
    }
}

/// Aborts the caller's transaction by raising [`FENCED_SQLSTATE`] in it:
/// its `COMMIT` then rolls back.
async fn abort(
    tx: &Transaction<'_>,
    key: &RecordKey,
    fence: u64,
) -> Result<(), tokio_postgres::Error> {
    // Only hex digits and a number go into the text: nothing to quote.
    let sql = format!(
        "DO $idem$ BEGIN RAISE EXCEPTION 'idem: the completion of key {} under fence {fence} was refused; this transaction cannot commit' USING ERRCODE = '{FENCED_SQLSTATE}'; END $idem$",
        key.digest.to_hex()
    );
    tx.batch_execute(&sql).await
}
