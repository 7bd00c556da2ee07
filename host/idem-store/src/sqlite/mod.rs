//! The SQLite store: the embedded default.
//!
//! - **Durability**: WAL, `synchronous=FULL` by default (a completed record
//!   survives power loss); `?synchronous=normal` trades the last commits on
//!   power loss (never on a process crash) for fewer fsyncs.
//! - **Transactions**: every write is `BEGIN IMMEDIATE`: it takes SQLite's
//!   write lock up front, so two processes never both read a record and then
//!   race to upgrade (which WAL would refuse with `SQLITE_BUSY_SNAPSHOT`),
//!   and the store clock is read *after* the lock is held, so "now" is
//!   ordered with the writes it decides. Other connections wait up to
//!   `busy_timeout`.
//! - **Several processes** may open the same file: all coordination goes
//!   through SQLite's file locks and the transactions above, and fences come
//!   from a sequence row updated in the claim's own transaction.
//! - **Threads**: SQLite calls block. On a multi-threaded tokio runtime
//!   each runs in place on the worker that makes it, marked as blocking
//!   (`block_in_place`), so that no thread switch is paid per call; on a
//!   current-thread runtime it goes to the blocking pool (`spawn_blocking`).
//!   A store owns one connection behind a mutex, handed to a waiting caller
//!   first when a transaction ends: SQLite admits one writer at a time
//!   anyway and nearly every call writes, so a pool would only add
//!   connections waiting on the same lock. Open several stores (as several
//!   processes do) for independent connections.
//! - **Schema** (`schema.rs`): versioned by `PRAGMA user_version`,
//!   migrated on open inside one `BEGIN IMMEDIATE` transaction (so racing
//!   openers migrate once) from `migrations/sqlite/*.sql`; `PRAGMA
//!   application_id` marks the file as an idem store so that another
//!   application's database is refused rather than modified.
//!
//! Files: this one holds the SQLite options (`synchronous`, busy timeout,
//! checkpoint interval); `connection.rs` opens the store, holds its
//! connection and runs its calls; `schema.rs` identifies and migrates a
//! file; `row.rs` reads and writes rows; the backend ports
//! (`crate::backend`): `records.rs` (records and their log),
//! `ownership.rs` (memberships and job leases), `policy_registry.rs`;
//! `field_index.rs` the lookup index, written behind the claims by an
//! indexer of its own (a thread per open store, while the store is idle);
//! `in_tx.rs` an effect's writes and its completion in one transaction;
//! `gate.rs` the gate a downstream keeps (its entries, and an effect
//! behind it in the store's transaction).

#[cfg(feature = "sqlite")]
mod connection;
#[cfg(feature = "sqlite")]
mod field_index;
#[cfg(feature = "sqlite")]
mod gate;
#[cfg(feature = "sqlite")]
mod in_tx;
#[cfg(feature = "sqlite")]
mod ownership;
#[cfg(feature = "sqlite")]
mod policy_registry;
#[cfg(feature = "sqlite")]
mod records;
#[cfg(feature = "sqlite")]
mod row;
#[cfg(feature = "sqlite")]
mod schema;

use std::time::Duration;

#[cfg(feature = "sqlite")]
use crate::port::Batching;

#[cfg(feature = "sqlite")]
pub use connection::SqliteStore;
#[cfg(feature = "sqlite")]
pub use schema::SCHEMA_VERSION;

/// What a batch costs a SQLite store ([`crate::Writes::batching`]): one
/// writer, and one write transaction carries any number of claims and
/// finishes, one fsync for all of them.
#[cfg(feature = "sqlite")]
pub(crate) const BATCHING: Batching = Batching {
    shares_commits: true,
    in_flight: 1,
    one_transaction: true,
};

// Exhaustive on purpose (not `#[non_exhaustive]`): SQLite's own settings of `PRAGMA
// synchronous`.
/// The `synchronous` setting (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Synchronous {
    /// fsync on every commit: durable across power loss (the default).
    #[default]
    Full,
    /// fsync at checkpoints only: durable across process crashes; the last
    /// commits may be lost on power loss.
    Normal,
}

impl Synchronous {
    #[cfg(feature = "sqlite")]
    pub(super) fn pragma(self) -> &'static str {
        match self {
            Synchronous::Full => "FULL",
            Synchronous::Normal => "NORMAL",
        }
    }
}

/// SQLite-specific options (from the URL's query).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SqliteOptions {
    /// `synchronous` (default FULL).
    pub synchronous: Synchronous,
    /// How long a call waits for another connection's lock (default 5 s).
    pub busy_timeout: Duration,
    /// Pages the write-ahead log may hold before a commit copies them back
    /// into the database file (`PRAGMA wal_autocheckpoint`; default 1,000,
    /// SQLite's). More makes batch jobs faster (fewer, larger checkpoints,
    /// each page copied back once however often it changed) at the cost of
    /// a longer pause for the commit that runs one, and a larger log file.
    pub wal_autocheckpoint: u32,
}

/// SQLite's own default for [`SqliteOptions::wal_autocheckpoint`].
const DEFAULT_WAL_AUTOCHECKPOINT: u32 = 1_000;

impl Default for SqliteOptions {
    fn default() -> Self {
        SqliteOptions {
            synchronous: Synchronous::Full,
            busy_timeout: Duration::from_secs(5),
            wal_autocheckpoint: DEFAULT_WAL_AUTOCHECKPOINT,
        }
    }
}
