//! [`Transactions`]: the store's own database, for an effect whose writes
//! commit in the same transaction as its holder's end.

use async_trait::async_trait;

use crate::vocabulary::StoreError;

/// The database a store keeps its records in, handed to an effect whose
/// business writes (tables beside idem's, in the same SQLite file or
/// PostgreSQL database) commit in one transaction with the holder's
/// completion: `SqliteStore::complete_in_transaction`,
/// `PostgresStore::complete_in_transaction`. One variant per backend this
/// build has (cargo features `sqlite`, `postgres`).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Database {
    /// A SQLite file: the effect runs on the store's one connection, in its
    /// `BEGIN IMMEDIATE` write transaction.
    #[cfg(feature = "sqlite")]
    Sqlite(crate::SqliteStore),
    /// A PostgreSQL database: the effect runs on one of the store's pooled
    /// connections, in a transaction that holds the record's row lock.
    #[cfg(feature = "postgres")]
    Postgres(crate::PostgresStore),
}

/// Whether a store can run an effect in its own transaction, and the
/// database it would run it in.
#[async_trait]
pub trait Transactions: Send + Sync + 'static {
    /// The store's database. A store with none that a business write could
    /// share (the in-memory store) refuses with
    /// [`StoreError::NotTransactional`] rather than pretend: nothing there
    /// is atomic with a write elsewhere. A store opened on first use opens
    /// here.
    async fn database(&self) -> Result<Database, StoreError>;
}
