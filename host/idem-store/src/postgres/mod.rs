//! The PostgreSQL store: one database shared by many processes and hosts.
//!
//! - **Client**: `tokio-postgres` behind a `deadpool-postgres` pool (size
//!   `idem_pool_size`, default 16); statements are prepared once per
//!   connection and cached. TLS with rustls (see the `tls` module).
//! - **Schema**: every object lives in one schema (`idem_schema`, default
//!   `idem`), so several services can share a database. Its name is the one
//!   identifier interpolated into SQL: it is checked against
//!   `[a-z_][a-z0-9_]{0,62}` and quoted. Every value is a bound parameter.
//! - **Migrations**: versioned in `idem_schema_migrations`, applied on
//!   open (and by [`crate::migrate`]) in one transaction holding a
//!   `pg_advisory_xact_lock` per schema, so racing processes migrate once.
//!   A schema newer than this build is refused
//!   ([`StoreError::DatabaseSchemaTooNew`]).
//! - **Clock**: leases and retention are measured by the *database
//!   server's* clock (`clock_timestamp()`, read after the record's row lock
//!   is held), never the caller's, so that every client of the database
//!   agrees on when a lease expired. Tests drive time through
//!   [`crate::StoreOptions::clock`]: a [`crate::ManualClock`] pins "now" to
//!   its reading (passed as a parameter of the same statement), and
//!   [`crate::StoreClock::system_with_offset`] shifts the server's clock.
//!   The SQL functions a service calls itself (`complete`, migration 9)
//!   read the server's clock alone: a test's clock does not reach them.
//! - **Fences**: `nextval` of a sequence in the schema: store-wide,
//!   monotonic, never reset by gc or reconnecting.
//! - **Transactions** (`records.rs`, the records port): a write runs in
//!   two round trips. The first pipelines `BEGIN`, `SELECT … FOR UPDATE` of
//!   the record and the clock (and a fence); `machine/` decides, as for
//!   every store; the second pipelines the write (conditional on the key and
//!   the fence it read) and `COMMIT`. A fresh claim (no row under the key,
//!   the common case) takes one round trip: a single
//!   `INSERT … ON CONFLICT DO NOTHING RETURNING` whose arithmetic mirrors
//!   `machine::new_record`, and a holder's finish a single conditional
//!   `UPDATE` mirroring `machine::finish` (each checked against the machine
//!   after every such write in debug builds); when they write nothing, the
//!   transaction above decides.
//! - **Isolation**: READ COMMITTED plus the row lock. Each call touches one
//!   record, and `FOR UPDATE` serialises every writer of that record and
//!   returns its latest committed version, which is all the state machine
//!   needs; SERIALIZABLE would add predicate locks and spurious aborts for
//!   nothing. The one gap of row locks, two claims of a key that has no row
//!   yet, is closed by the primary key: the loser's `INSERT … ON CONFLICT
//!   DO NOTHING` writes nothing and the call is retried, and then sees the
//!   winner's row. Serialization failures and deadlocks (SQLSTATE 40001,
//!   40P01) cannot arise from these statements at this level, but a server
//!   configured with `default_transaction_isolation = serializable` would
//!   raise them: the whole call is retried (a few times), which is safe
//!   because a failed transaction changed nothing.
//! - **The lookup index** (migration 10): a lookup by an operation's field
//!   (`idem inspect --field invoice_id=R-189`, the console's search) asks a
//!   GIN index (`jsonb_path_ops`) over the kept operation's `fields`, as
//!   `jsonb`, for the records containing `{"invoice_id": "R-189"}` (and
//!   `{"amount": 150}` beside `{"amount": "150"}` when the value is also a
//!   JSON number or boolean); the host then checks each field's spelling.
//!   Every field of every operation is served without a declaration, which
//!   an expression index per field (`operation::jsonb -> 'fields' ->>
//!   'invoice_id'`) would need; the `operation` column stays `text` (a
//!   `jsonb` column would re-encode every claim's operation and change what
//!   is read back), the index being over an expression of it
//!   (`idem_kept_fields`, NULL for a record that kept none or for text
//!   `jsonb` refuses, so that no claim fails on the index). GIN's pending
//!   list keeps an insert's cost to an append; see `docs/benchmarks.md`
//!   ("the lookup index") for what a claim pays.
//! - **Cancellation**: a call dropped mid-transaction discards its
//!   connection (the server rolls back) instead of returning it to the pool
//!   with a transaction open.
//!
//! Files: `open.rs` opens the store (the pool, the schema's statements);
//! `statements.rs` every statement, built from the pieces in `sql.rs`; `schema.rs` migrates;
//! `connection.rs` the pool's connections, errors and the retry rule;
//! `row.rs` the record rows; the backend ports (`crate::backend`):
//! `records.rs` (records and their log; `fast.rs` its one-statement
//! claim and finish; `batch_claim.rs` and
//! `batch_finish.rs` its batch statements), `ownership.rs` (memberships and
//! job leases), `policy_registry.rs` (namespace registrations, kept
//! components and settings); `in_tx.rs` an effect's writes and its
//! completion in one transaction of the store's pool, `caller_tx.rs` the
//! completion inside a transaction the caller owns; `gate.rs` the gate a
//! downstream keeps (its entries, and the caller-owned form); `tls.rs` and `url.rs`
//! how to connect.

#[cfg(feature = "postgres")]
mod batch_claim;
#[cfg(feature = "postgres")]
mod batch_finish;
#[cfg(feature = "postgres")]
mod caller_tx;
#[cfg(feature = "postgres")]
mod connection;
#[cfg(feature = "postgres")]
mod fast;
#[cfg(feature = "postgres")]
mod gate;
#[cfg(feature = "postgres")]
mod in_tx;
#[cfg(feature = "postgres")]
mod open;
#[cfg(feature = "postgres")]
mod ownership;
#[cfg(feature = "postgres")]
mod policy_registry;
#[cfg(feature = "postgres")]
mod records;
#[cfg(feature = "postgres")]
mod row;
#[cfg(feature = "postgres")]
mod schema;
#[cfg(feature = "postgres")]
mod sql;
#[cfg(feature = "postgres")]
mod statements;
// TLS by rustls with the `tls` feature; without it, plain connections only,
// and a URL that asks for encryption is refused naming the feature.
#[cfg(feature = "tls")]
mod tls;
#[cfg(all(feature = "postgres", not(feature = "tls")))]
#[path = "no_tls.rs"]
mod tls;
mod url;

#[cfg(feature = "postgres")]
pub use caller_tx::{FENCED_SQLSTATE, INVALID_COMPLETION_SQLSTATE};
#[cfg(feature = "postgres")]
use open::Inner;
#[cfg(feature = "postgres")]
pub use open::PostgresStore;
#[cfg(feature = "postgres")]
pub use schema::POSTGRES_SCHEMA_VERSION;
/// What a batch costs a PostgreSQL store ([`crate::Writes::batching`]):
/// one statement for a batch of claims or finishes, one round trip and one
/// commit for all of them. The server flushes concurrent commits' WAL
/// together: a few batch statements in flight keep it as busy as many
/// single ones. What a batch statement leaves goes one call at a time, with
/// its fast paths: a shared transaction would hold its row locks across
/// round trips for nothing.
#[cfg(feature = "postgres")]
pub(crate) const BATCHING: crate::port::Batching = crate::port::Batching {
    shares_commits: true,
    in_flight: 4,
    one_transaction: false,
};

pub use url::{DEFAULT_POOL_SIZE, DEFAULT_SCHEMA, PostgresUrl, TlsMode};
pub(crate) use url::{is_postgres, redact};
