//! An effect in the store's own transaction: the caller's business writes
//! (tables beside idem's, in the store's SQLite file or PostgreSQL
//! database) and the holder's completion commit together, so a crash
//! between "charged" and "recorded" cannot happen: either both are
//! durable or neither is.
//!
//! The forms, composed from the store's (`idem_store::Database`):
//!
//! - [`Engine::run_once_in_sqlite`]: `run_once` with a closure handed the
//!   store's `rusqlite::Transaction` (synchronous: it is not `Send`, and
//!   runs on the thread holding the store's one connection);
//! - [`Engine::run_once_in_postgres`]: the same with an async closure
//!   handed a `tokio_postgres::Transaction` on one of the store's pooled
//!   connections, run again whole after a serialization failure or
//!   deadlock;
//! - [`Execution::run_in_sqlite`], [`Execution::run_in_postgres`]: the
//!   second halves of those, for a holder that claimed with
//!   [`Engine::begin_in_store`] and does something in between;
//! - [`Execution::complete_in_postgres`]: the caller-owned form, for a
//!   service that already holds a transaction on the store's database.
//!
//! Each form claims with [`Engine::begin_in_store`]: the record says its
//! effect commits with its end, so an expired claim is known to have done
//! nothing and a duplicate re-executes it instead of sending it to review.
//! The completion is conditional on the claim's fence inside the
//! transaction, so a deposed holder's business writes roll back and it
//! gets [`EngineError::Fenced`]. A failure of the effect rolls its writes
//! back and is recorded in a write of its own under the fence, as
//! [`Engine::run_once`] records one. No heartbeat runs meanwhile: from its
//! first statement the transaction holds the record (SQLite's write lock,
//! PostgreSQL's row lock), so nobody can take the key over until it ends,
//! and a heartbeat would only wait for that lock. The completion batcher
//! (group commit) is not involved: these ends commit in the effect's own
//! transaction. The in-memory store refuses ([`StoreError::NotTransactional`])
//! before anything is claimed.
//!
//! The effects' shapes are named once, [`SqliteEffect`] and
//! [`PostgresEffect`]: every closure of that shape is one.

use idem_core::Operation;
#[cfg(feature = "postgres")]
use idem_store::PostgresStore;
#[cfg(feature = "postgres")]
use idem_store::tokio_postgres::{self, IsolationLevel};
#[cfg(any(feature = "sqlite", feature = "postgres"))]
use idem_store::{Database, EffectError, Ending, Outcome, Store, StoreError, TxEnd};
#[cfg(feature = "sqlite")]
use idem_store::{SqliteStore, rusqlite};

use super::{Begin, Engine, EngineError};
#[cfg(any(feature = "sqlite", feature = "postgres"))]
use super::{ExecContext, Execution, Failed, RunResult};

#[cfg(feature = "sqlite")]
/// An effect in the SQLite store's own transaction
/// ([`Engine::run_once_in_sqlite`], [`Execution::run_in_sqlite`]): a
/// closure handed the store's `rusqlite::Transaction` and the claim's
/// context, answering the outcome to record (or the effect's failure).
/// Synchronous, since the transaction is not `Send`, and run on the
/// thread that holds the store's one connection (which may be one of the
/// blocking pool's), hence `Send + 'static`: move what it needs into it.
///
/// Implemented for every closure of that shape: name it in a bound of
/// your own (`fn charge(effect: impl SqliteEffect)`) rather than spelling
/// the signature out.
pub trait SqliteEffect:
    FnOnce(
        &rusqlite::Transaction<'_>,
        &ExecContext,
    ) -> Result<Outcome, EffectError<rusqlite::Error>>
    + Send
    + 'static
{
}

#[cfg(feature = "sqlite")]
impl<F> SqliteEffect for F where
    F: FnOnce(
            &rusqlite::Transaction<'_>,
            &ExecContext,
        ) -> Result<Outcome, EffectError<rusqlite::Error>>
        + Send
        + 'static
{
}

#[cfg(feature = "postgres")]
/// An effect in the PostgreSQL store's own transaction
/// ([`Engine::run_once_in_postgres`], [`Execution::run_in_postgres`]): an
/// async closure handed a `tokio_postgres::Transaction` and the claim's
/// context, answering the outcome to record (or the effect's failure).
/// `FnMut`, since a serialization failure or deadlock runs it again.
///
/// Implemented for every async closure of that shape, as
/// [`SqliteEffect`] is.
pub trait PostgresEffect:
    AsyncFnMut(
    &tokio_postgres::Transaction<'_>,
    &ExecContext,
) -> Result<Outcome, EffectError<tokio_postgres::Error>>
{
}

#[cfg(feature = "postgres")]
impl<F> PostgresEffect for F where
    F: AsyncFnMut(
        &tokio_postgres::Transaction<'_>,
        &ExecContext,
    ) -> Result<Outcome, EffectError<tokio_postgres::Error>>
{
}

impl Engine {
    /// [`Engine::begin`] for a holder whose effect commits in the same
    /// store transaction as its end: the claim (or take-over) says so, and
    /// the record keeps it. Should the claim expire, a duplicate knows the
    /// holder did nothing that lasts — its writes commit with its end, or
    /// not at all — so its policy is told the attempt failed retryably
    /// (see `idem_store::Existing::duplicate_context`) and re-executes
    /// under a higher fence; the record never waits for review, and the
    /// late holder's commit is refused by its fence inside its own
    /// transaction.
    ///
    /// The forms below begin this way. Call it directly for the
    /// caller-owned form: complete with [`Execution::complete_in_postgres`]
    /// inside the transaction that holds the effect's writes, or fail the
    /// claim ([`Execution::fail`]) after rolling them back. Ending such a
    /// claim any other way after an effect that lasts breaks the promise
    /// the record makes. A store with no transaction to share (the
    /// in-memory store) is refused ([`StoreError::NotTransactional`])
    /// before anything is claimed.
    pub async fn begin_in_store(&self, op: &Operation) -> Result<Begin, EngineError> {
        self.store().database().await?;
        let keyed = self.derive(op)?;
        self.begin_claiming(op, keyed, true, None).await
    }

    #[cfg(feature = "sqlite")]
    /// [`Engine::run_once`] with the effect's writes in the SQLite store's
    /// own transaction: `effect` is handed the store's
    /// `rusqlite::Transaction` (a `BEGIN IMMEDIATE` one) and the claim's
    /// context; the outcome it returns is recorded in that transaction,
    /// conditional on the claim's fence, and committed with its writes.
    ///
    /// - A deposed holder commits nothing of its writes and gets
    ///   [`EngineError::Fenced`].
    /// - `effect` failing ([`EffectError`]; a statement's error through
    ///   `?` is a retryable failure) rolls its writes back, and the failure
    ///   is recorded on its own under the fence:
    ///   [`RunResult::Executed`] with `Err(Failed)`.
    /// - A store that is not SQLite is refused
    ///   ([`StoreError::NotTransactional`]) before anything is claimed.
    ///
    /// `effect` holds the store's one writer while it runs: keep it to
    /// database writes (network calls belong before it).
    pub async fn run_once_in_sqlite<F>(
        &self,
        op: &Operation,
        effect: F,
    ) -> Result<RunResult, EngineError>
    where
        F: SqliteEffect,
    {
        sqlite_of(self.store()).await?;
        match self.begin_in_store(op).await? {
            Begin::Execute(execution) => execution.run_in_sqlite(effect).await,
            other => Ok(RunResult::NotRun(other)),
        }
    }

    #[cfg(feature = "postgres")]
    /// [`Engine::run_once`] with the effect's writes in the PostgreSQL
    /// store's own transaction: `effect` is handed a
    /// `tokio_postgres::Transaction` on one of the store's connections
    /// (`isolation`: the server's default when `None`) and the claim's
    /// context; the outcome it returns is recorded in that transaction,
    /// conditional on the claim's fence, and committed with its writes.
    ///
    /// - A deposed holder commits nothing of its writes and gets
    ///   [`EngineError::Fenced`].
    /// - A serialization failure or deadlock (SQLSTATE 40001, 40P01) runs
    ///   the whole transaction again, `effect` included (a few times), and
    ///   is never recorded as the effect's failure: `effect` may run more
    ///   than once, but only one run's writes commit.
    /// - `effect` failing otherwise rolls its writes back, and the failure
    ///   is recorded on its own under the fence.
    /// - A `COMMIT` whose answer was lost is read back (see
    ///   `PostgresStore::complete_in_transaction`), never guessed.
    /// - A store that is not PostgreSQL is refused
    ///   ([`StoreError::NotTransactional`]) before anything is claimed.
    ///
    /// Where the future must be `Send` (`tokio::spawn`, an axum handler),
    /// write the effect as an `async move |tx, ctx| …` closure that owns
    /// what it uses (an `Arc`, a cloned `String`): an async closure that
    /// *borrows* its surroundings makes today's compiler unable to prove
    /// the future `Send` ("implementation of `Send` is not general
    /// enough", rust-lang/rust#110338), though nothing in it is shared.
    pub async fn run_once_in_postgres<F>(
        &self,
        op: &Operation,
        isolation: Option<IsolationLevel>,
        effect: F,
    ) -> Result<RunResult, EngineError>
    where
        F: PostgresEffect,
    {
        postgres_of(self.store()).await?;
        match self.begin_in_store(op).await? {
            Begin::Execute(execution) => execution.run_in_postgres(isolation, effect).await,
            other => Ok(RunResult::NotRun(other)),
        }
    }
}

#[cfg(any(feature = "sqlite", feature = "postgres"))]
impl Execution {
    #[cfg(feature = "sqlite")]
    /// The second half of [`Engine::run_once_in_sqlite`], for a holder
    /// that claimed with [`Engine::begin_in_store`] and does something
    /// between its claim and its effect (a network call, a pause): runs
    /// `effect` in the SQLite store's own transaction and completes this
    /// attempt in it, with the same answers.
    pub async fn run_in_sqlite<F>(self, effect: F) -> Result<RunResult, EngineError>
    where
        F: SqliteEffect,
    {
        let database = sqlite_of(self.store()).await?;
        let ctx = self.context();
        let (key, fence) = (self.key().clone(), self.fence());
        let end = database
            .complete_in_transaction(&key, fence, move |tx| effect(tx, &ctx))
            .await;
        settle(self, end).await
    }

    #[cfg(feature = "postgres")]
    /// The second half of [`Engine::run_once_in_postgres`], for a holder
    /// that claimed with [`Engine::begin_in_store`]: runs `effect` in a
    /// transaction on the PostgreSQL store's pool and completes this
    /// attempt in it, with the same answers.
    pub async fn run_in_postgres<F>(
        self,
        isolation: Option<IsolationLevel>,
        effect: F,
    ) -> Result<RunResult, EngineError>
    where
        F: PostgresEffect,
    {
        let database = postgres_of(self.store()).await?;
        let ctx = self.context();
        let (key, fence) = (self.key().clone(), self.fence());
        let end = database
            .complete_in_transaction(&key, fence, isolation, &ctx, effect)
            .await;
        settle(self, end).await
    }

    #[cfg(feature = "postgres")]
    /// Completes this attempt with `outcome` inside the caller's own
    /// transaction `tx` on the store's PostgreSQL database (the caller
    /// commits it): its business writes and this completion are durable
    /// together. Answers the outcome as the store keeps it.
    ///
    /// The record's row stays locked until `tx` ends. A deposed holder
    /// gets [`EngineError::Fenced`] *and* `tx` is aborted (SQLSTATE
    /// `idem_store::FENCED_SQLSTATE`), so committing it anyway rolls back.
    /// If the answer to the caller's `COMMIT` is lost, ask
    /// [`Execution::completed_with`]; never commit again blindly.
    /// A store that is not PostgreSQL is refused.
    pub async fn complete_in_postgres(
        &self,
        tx: &tokio_postgres::Transaction<'_>,
        outcome: Outcome,
    ) -> Result<Outcome, EngineError> {
        let database = postgres_of(self.store()).await?;
        let result = database
            .complete_in(tx, self.key(), self.fence(), outcome)
            .await
            .map_err(EngineError::from);
        super::telemetry::finished_with(
            self.key(),
            self.fence(),
            Ending::Completed,
            result.as_ref().err(),
        );
        result
    }

    #[cfg(feature = "postgres")]
    /// Whether this attempt's completion with `outcome` is committed (read
    /// back under the record's row lock, which waits for the caller's
    /// transaction to end on the server): `true` proves it committed,
    /// `false` that it did not. For a caller whose `COMMIT` answer was
    /// lost after [`Execution::complete_in_postgres`].
    pub async fn completed_with(&self, outcome: &Outcome) -> Result<bool, EngineError> {
        let database = postgres_of(self.store()).await?;
        Ok(database
            .completed_under(self.key(), self.fence(), outcome)
            .await?)
    }
}

#[cfg(any(feature = "sqlite", feature = "postgres"))]
/// What an effect's transaction came to, as [`RunResult`]: committed, or
/// the effect's failure recorded now under the fence (its writes were
/// rolled back), or the store's refusal.
async fn settle(
    execution: Execution,
    end: Result<TxEnd, StoreError>,
) -> Result<RunResult, EngineError> {
    let (key, fence, attempt) = (
        execution.key().clone(),
        execution.fence(),
        execution.attempt(),
    );
    let result = match end.map_err(EngineError::from) {
        Ok(TxEnd::Committed(outcome)) => {
            super::telemetry::finished_with(&key, fence, Ending::Completed, None);
            Ok(outcome)
        }
        Ok(TxEnd::Failed { retryable, outcome }) => {
            execution.fail(retryable, outcome.clone()).await?;
            Err(Failed { retryable, outcome })
        }
        Err(e) => {
            super::telemetry::finished_with(&key, fence, Ending::Completed, Some(&e));
            return Err(e);
        }
    };
    Ok(RunResult::Executed {
        key,
        fence,
        attempt,
        result,
    })
}

#[cfg(feature = "sqlite")]
/// The store's SQLite database, or the refusal.
async fn sqlite_of(store: &Store) -> Result<SqliteStore, EngineError> {
    // (With one backend compiled, the other arm cannot match.)
    #[allow(unreachable_patterns)]
    match store.database().await? {
        Database::Sqlite(sqlite) => Ok(sqlite),
        _ => Err(not_this(store, "SQLite", "run_once_in_postgres")),
    }
}

#[cfg(feature = "postgres")]
/// The store's PostgreSQL database, or the refusal.
async fn postgres_of(store: &Store) -> Result<PostgresStore, EngineError> {
    #[allow(unreachable_patterns)]
    match store.database().await? {
        Database::Postgres(postgres) => Ok(postgres),
        _ => Err(not_this(store, "PostgreSQL", "run_once_in_sqlite")),
    }
}

#[cfg(any(feature = "sqlite", feature = "postgres"))]
/// A transactional effect of the other backend's kind.
fn not_this(store: &Store, wanted: &str, instead: &str) -> EngineError {
    EngineError::Store(StoreError::NotTransactional {
        store: store.describe().to_string(),
        why: format!(
            "this effect runs in a {wanted} transaction, and the store is not {wanted} (use `{instead}` for this store)"
        ),
    })
}
