//! Opening a store by URL, and migrating one.

use std::sync::Arc;

use crate::error::StoreError;
use crate::record::StoreOptions;
use crate::store::Store;
use crate::url::StoreUrl;
use crate::{MemoryStore, PostgresStore, SqliteStore};

/// Opens the store a URL names: `sqlite:PATH`, `sqlite://PATH` (query
/// `?synchronous=full|normal&busy_timeout_ms=N`), `postgres://…` or
/// `postgresql://…` (see [`PostgresUrl`]) or `memory:`. Opening migrates a
/// persistent store's schema.
pub async fn open(url: &str, options: StoreOptions) -> Result<Arc<dyn Store>, StoreError> {
    match url.parse::<StoreUrl>()? {
        StoreUrl::Memory => Ok(Arc::new(MemoryStore::new(options))),
        StoreUrl::Sqlite {
            path,
            options: sqlite,
        } => {
            // Opening runs migrations and may wait on other processes' locks.
            let store =
                tokio::task::spawn_blocking(move || SqliteStore::open(&path, sqlite, options))
                    .await
                    .map_err(|e| StoreError::Task(e.to_string()))??;
            Ok(Arc::new(store))
        }
        StoreUrl::Postgres(url) => Ok(Arc::new(PostgresStore::open(url, options).await?)),
    }
}

/// Brings the schema of the store a URL names to the newest version this
/// build knows (creating the store when absent) and returns that version:
/// the `idem migrate --store URL` entry point. Idempotent, and safe to run
/// from several processes at once. A store of a newer schema is refused
/// ([`StoreError::SchemaTooNew`], [`StoreError::DatabaseSchemaTooNew`]); an
/// in-memory store has no schema (version 0).
pub async fn migrate(url: &str) -> Result<i64, StoreError> {
    match url.parse::<StoreUrl>()? {
        StoreUrl::Memory => Ok(0),
        StoreUrl::Sqlite {
            path,
            options: sqlite,
        } => {
            let store = tokio::task::spawn_blocking(move || {
                SqliteStore::open(&path, sqlite, StoreOptions::default())
            })
            .await
            .map_err(|e| StoreError::Task(e.to_string()))??;
            store.schema_version().await
        }
        StoreUrl::Postgres(url) => {
            PostgresStore::open(url, StoreOptions::default())
                .await?
                .schema_version()
                .await
        }
    }
}
