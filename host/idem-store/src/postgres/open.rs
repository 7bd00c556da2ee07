//! Opening a PostgreSQL store: the pool, the schema's statements, and a
//! few queries about the store itself.

use std::sync::Arc;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};

use super::statements::Sql;
use super::{PostgresUrl, tls};
use crate::vocabulary::StoreOptions;
use crate::vocabulary::{ConnectErrorKind, StoreError};

/// A store in a PostgreSQL database. Cheap to clone (clones share the
/// pool).
#[derive(Debug, Clone)]
pub struct PostgresStore {
    pub(super) inner: Arc<Inner>,
}

#[derive(Debug)]
pub(super) struct Inner {
    pub(super) pool: Pool,
    pub(super) sql: Sql,
    pub(super) url: PostgresUrl,
    /// The redacted URL: for messages.
    pub(super) name: String,
    pub(super) options: StoreOptions,
}

impl PostgresStore {
    /// Opens the store `url` names (a `postgres://` or `postgresql://` URL,
    /// see [`PostgresUrl`]): connects once to check the server, the
    /// credentials and TLS, then migrates the schema.
    pub async fn connect(url: &str, options: StoreOptions) -> Result<Self, StoreError> {
        Self::open(url.parse()?, options).await
    }

    /// Opens the store at a parsed URL: connects once, migrates the schema.
    pub async fn open(url: PostgresUrl, options: StoreOptions) -> Result<Self, StoreError> {
        let tls = tls::connector(&url)?;
        let manager = Manager::from_config(
            url.client_config()?,
            tls,
            ManagerConfig {
                // Checking out a connection costs nothing; a broken one fails
                // its first statement and is dropped by the pool. Connections
                // that may hold an open transaction never go back (`Conn`).
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(url.pool_size)
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .build()
            .map_err(|e| StoreError::Connect {
                url: url.redacted().to_string(),
                kind: ConnectErrorKind::Other,
                detail: e.to_string(),
            })?;
        let store = PostgresStore {
            inner: Arc::new(Inner {
                pool,
                sql: Sql::new(&url.schema, options.attempt_log),
                name: url.redacted().to_string(),
                url,
                options,
            }),
        };
        if store.inner.options.migrate {
            store.migrate().await?;
        } else {
            store.check_current().await?;
        }
        Ok(store)
    }

    /// The schema's version (for `idem inspect` and tests).
    pub async fn schema_version(&self) -> Result<i64, StoreError> {
        let conn = self.inner.conn().await?;
        Ok(self.inner.schema_version_on(&conn).await?.unwrap_or(0))
    }

    /// Whether the pool's connections are encrypted (TLS), as the server
    /// reports it.
    pub async fn tls_in_use(&self) -> Result<bool, StoreError> {
        let conn = self.inner.conn().await?;
        let row = conn
            .query_one(
                "SELECT COALESCE((SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()), false)",
                &[],
            )
            .await
            .map_err(|e| self.inner.err("checking TLS", e))?;
        Ok(row.get(0))
    }

    /// Drops the store's schema and everything in it: every record, the
    /// attempt log, the registry. For tests that give each run a schema of
    /// its own (the conformance suite does); never called by idem itself.
    /// Gives up rather than wait long on a lock.
    pub async fn drop_schema(&self) -> Result<(), StoreError> {
        let conn = self.inner.conn().await?;
        conn.batch_execute(&format!(
            "SET lock_timeout = '10s'; DROP SCHEMA IF EXISTS {} CASCADE",
            super::sql::quote(&self.inner.url.schema)
        ))
        .await
        .map_err(|e| self.inner.err("dropping the schema", e))
    }

    /// The schema this store's tables live in.
    pub fn schema(&self) -> &str {
        &self.inner.url.schema
    }
}
