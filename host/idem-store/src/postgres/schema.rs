//! The PostgreSQL schema: versioned in `idem_schema_migrations`, migrated
//! from `migrations/postgres/*.sql` in one transaction under an advisory
//! lock per schema, so racing processes migrate once.

use super::connection::Conn;
use super::sql::quote;
use super::{Inner, PostgresStore};
use crate::migrations;
use crate::vocabulary::{ConnectErrorKind, StoreError};

/// The newest PostgreSQL schema version this build knows: 1 records and
/// fences; 2 memberships with their epochs, and job leases; 3 the records'
/// column checks as domains.
pub const POSTGRES_SCHEMA_VERSION: i64 = migrations::POSTGRES.len() as i64;

impl PostgresStore {
    /// Checks, changing nothing, that the schema exists at
    /// [`POSTGRES_SCHEMA_VERSION`] (opening with `migrate` off).
    pub(super) async fn check_current(&self) -> Result<(), StoreError> {
        let inner = &self.inner;
        let conn = inner.conn().await?;
        let found = inner.schema_version_on(&conn).await?;
        match found {
            Some(v) if v == POSTGRES_SCHEMA_VERSION => Ok(()),
            Some(v) if v > POSTGRES_SCHEMA_VERSION => inner.check_not_newer(v),
            _ => Err(StoreError::NotMigrated {
                store: inner.name.clone(),
                found,
                wanted: POSTGRES_SCHEMA_VERSION,
            }),
        }
    }

    /// Brings the schema to [`POSTGRES_SCHEMA_VERSION`] (creating it when
    /// absent) and returns the version. Safe to run from many processes at
    /// once: they serialise on an advisory lock and migrate once. Opening a
    /// store already does this.
    pub async fn migrate(&self) -> Result<i64, StoreError> {
        let inner = &self.inner;
        let mut conn = inner.conn().await?;
        // Fast path, no lock: already current.
        if let Some(found) = inner.schema_version_on(&conn).await? {
            if found == POSTGRES_SCHEMA_VERSION {
                return Ok(found);
            }
            inner.check_not_newer(found)?;
        }
        let schema = &inner.url.schema;
        let s = quote(schema);
        let fail = |e: tokio_postgres::Error| inner.open_err(&e);
        conn.in_transaction = true;
        conn.batch_execute("BEGIN").await.map_err(fail)?;
        conn.query_one(
            "SELECT pg_advisory_xact_lock($1::int8)",
            &[&advisory_key(schema)],
        )
        .await
        .map_err(fail)?;
        // Creating a schema that exists needs no privilege this way, unlike
        // CREATE SCHEMA IF NOT EXISTS, which checks CREATE on the database.
        let exists: bool = conn
            .query_one(
                "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)",
                &[schema],
            )
            .await
            .map_err(fail)?
            .get(0);
        if !exists {
            conn.batch_execute(&format!("CREATE SCHEMA {s}"))
                .await
                .map_err(fail)?;
        }
        conn.batch_execute(&format!(
            "CREATE TABLE IF NOT EXISTS {s}.idem_schema_migrations (
                version    integer     PRIMARY KEY,
                applied_at timestamptz NOT NULL DEFAULT now()
            )"
        ))
        .await
        .map_err(fail)?;
        // Read again under the lock: another process may have migrated.
        let found = inner.schema_version_on(&conn).await?.unwrap_or(0);
        inner.check_not_newer(found)?;
        if found == 0 {
            // A `records` table idem did not create: another application's.
            let foreign: bool = conn
                .query_one(
                    "SELECT to_regclass($1) IS NOT NULL",
                    &[&format!("{s}.records")],
                )
                .await
                .map_err(fail)?
                .get(0);
            if foreign {
                return Err(StoreError::Connect {
                    url: inner.name.clone(),
                    kind: ConnectErrorKind::ForeignSchema,
                    detail: format!(
                        "schema `{schema}` holds a `records` table but no idem migration history; choose another idem_schema"
                    ),
                });
            }
        }
        for (from, migration) in migrations::POSTGRES
            .iter()
            .enumerate()
            .skip(usize::try_from(found).unwrap_or(usize::MAX))
        {
            conn.batch_execute(&migration.sql.replace("{s}", &s))
                .await
                .map_err(|e| match fail(e) {
                    StoreError::Connect { url, kind, detail } => StoreError::Connect {
                        url,
                        kind,
                        detail: format!("{}: {detail}", migration.name),
                    },
                    other => other,
                })?;
            let to = i32::try_from(from + 1).unwrap_or(i32::MAX);
            conn.execute(
                &format!("INSERT INTO {s}.idem_schema_migrations (version) VALUES ($1)"),
                &[&to],
            )
            .await
            .map_err(fail)?;
        }
        conn.batch_execute("COMMIT").await.map_err(fail)?;
        conn.in_transaction = false;
        Ok(POSTGRES_SCHEMA_VERSION)
    }
}

impl Inner {
    pub(super) fn check_not_newer(&self, found: i64) -> Result<(), StoreError> {
        if found > POSTGRES_SCHEMA_VERSION {
            return Err(StoreError::DatabaseSchemaTooNew {
                store: format!("{} (schema {})", self.name, self.url.schema),
                found,
                supported: POSTGRES_SCHEMA_VERSION,
            });
        }
        Ok(())
    }

    /// The schema's version, `None` when it has no migration table yet.
    pub(super) async fn schema_version_on(&self, conn: &Conn) -> Result<Option<i64>, StoreError> {
        let s = quote(&self.url.schema);
        let fail = |e: tokio_postgres::Error| self.open_err(&e);
        let has_table: bool = conn
            .query_one(
                "SELECT to_regclass($1) IS NOT NULL",
                &[&format!("{s}.idem_schema_migrations")],
            )
            .await
            .map_err(fail)?
            .get(0);
        if !has_table {
            return Ok(None);
        }
        let version: i64 = conn
            .query_one(
                &format!("SELECT COALESCE(max(version), 0)::int8 FROM {s}.idem_schema_migrations"),
                &[],
            )
            .await
            .map_err(fail)?
            .get(0);
        Ok(Some(version))
    }
}

/// The advisory lock that serialises migrations of one schema: FNV-1a of
/// a fixed prefix and the schema name (stable across builds and hosts).
fn advisory_key(schema: &str) -> i64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in b"idem-migrate:".iter().chain(schema.as_bytes()) {
        hash ^= u64::from(*b);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    i64::from_ne_bytes(hash.to_ne_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advisory_keys_differ_by_schema() {
        assert_ne!(advisory_key("idem"), advisory_key("idem2"));
        assert_eq!(advisory_key("idem"), advisory_key("idem"));
    }
}
