//! The schema migrations of the SQL stores, as `.sql` files under
//! `migrations/sqlite/` and `migrations/postgres/`, embedded at build time
//! (see `build.rs`). A migration is applied once, in order, inside the
//! store's migration lock; the files are append-only: an existing one never
//! changes, a new version is a new file. In the PostgreSQL files, `{s}`
//! stands for the store's quoted schema.

/// One migration file.
#[derive(Debug, Clone, Copy)]
pub struct Migration {
    /// Its file name (`002_ownership.sql`).
    pub name: &'static str,
    /// Its SQL.
    pub sql: &'static str,
}

include!(concat!(env!("OUT_DIR"), "/migrations.rs"));
