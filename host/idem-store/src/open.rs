//! Opening a store by URL, and migrating one.

use crate::MemoryStore;
#[cfg(feature = "postgres")]
use crate::PostgresStore;
use crate::store::Store;
use crate::url::StoreUrl;
use crate::vocabulary::StoreError;
use crate::vocabulary::StoreOptions;
#[cfg(feature = "sqlite")]
use crate::{SqliteOptions, SqliteStore};

/// Opens the store a URL names: `sqlite:PATH`, `sqlite://PATH` (query
/// `?synchronous=full|normal&busy_timeout_ms=N&wal_autocheckpoint=PAGES`), `postgres://…` or
/// `postgresql://…` (see [`crate::PostgresUrl`]) or `memory:`. Opening
/// migrates a persistent store's schema. A URL of a backend this build left
/// out (cargo features `sqlite`, `postgres`) is
/// [`StoreError::UnsupportedUrl`].
pub async fn open(url: &str, options: StoreOptions) -> Result<Store, StoreError> {
    match url.parse::<StoreUrl>()? {
        StoreUrl::Memory => Ok(MemoryStore::new(options).into()),
        #[cfg(feature = "sqlite")]
        StoreUrl::Sqlite {
            path,
            options: sqlite,
        } => Ok(open_sqlite(path, sqlite, options).await?.into()),
        #[cfg(feature = "postgres")]
        StoreUrl::Postgres(url) => Ok(PostgresStore::open(url, options).await?.into()),
        #[allow(unreachable_patterns)] // Reached only with a backend left out.
        _ => Err(not_built(url)),
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
        #[cfg(feature = "sqlite")]
        StoreUrl::Sqlite {
            path,
            options: sqlite,
        } => {
            open_sqlite(path, sqlite, StoreOptions::default())
                .await?
                .schema_version()
                .await
        }
        #[cfg(feature = "postgres")]
        StoreUrl::Postgres(url) => {
            PostgresStore::open(url, StoreOptions::default())
                .await?
                .schema_version()
                .await
        }
        #[allow(unreachable_patterns)] // Reached only with a backend left out.
        _ => Err(not_built(url)),
    }
}

/// Opens a SQLite file off the async worker: opening runs migrations and
/// may wait on other processes' locks.
#[cfg(feature = "sqlite")]
async fn open_sqlite(
    path: std::path::PathBuf,
    sqlite: SqliteOptions,
    options: StoreOptions,
) -> Result<SqliteStore, StoreError> {
    tokio::task::spawn_blocking(move || SqliteStore::open(&path, sqlite, options))
        .await
        .map_err(|e| StoreError::Task(e.to_string()))?
}

/// The error for a URL whose backend this build left out.
#[cfg_attr(all(feature = "sqlite", feature = "postgres"), allow(dead_code))]
fn not_built(url: &str) -> StoreError {
    let feature = if crate::postgres::is_postgres(url) {
        "postgres"
    } else {
        "sqlite"
    };
    StoreError::UnsupportedUrl {
        url: crate::redacted_url(url),
        why: format!(
            "this build of idem-store leaves that backend out (cargo feature `{feature}`)"
        ),
    }
}

#[cfg(all(test, not(feature = "postgres")))]
mod tests {
    /// A build without PostgreSQL refuses its URLs, naming the feature and
    /// never the password.
    #[tokio::test]
    async fn a_url_of_a_backend_left_out_is_refused() {
        let url = "postgres://idem:secret@db.example/idem";
        for result in [
            super::open(url, Default::default()).await.map(|_| 0),
            super::migrate(url).await,
        ] {
            let message = result.expect_err("no PostgreSQL in this build").to_string();
            assert!(message.contains("cargo feature `postgres`"), "{message}");
            assert!(!message.contains("secret"), "{message}");
        }
    }
}
