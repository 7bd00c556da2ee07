//! Namespace registrations, kept components and settings in a SQLite file.

use async_trait::async_trait;
use rusqlite::OptionalExtension;

use super::connection::SqliteStore;
use crate::backend::RegistryBackend;
use crate::machine::Change;
use crate::vocabulary::Registration;
use crate::vocabulary::StoreError;

#[async_trait]
impl RegistryBackend for SqliteStore {
    async fn read_registrations(
        &self,
        namespace: Option<&str>,
    ) -> Result<Vec<Registration>, StoreError> {
        let namespace = namespace.map(str::to_string);
        self.blocking(move |inner| {
            inner.read(|conn, _now| {
                let err = |e| inner.err("reading registrations", e);
                let mut stmt = conn
                    .prepare_cached(
                        "SELECT document FROM registrations WHERE ?1 IS NULL OR namespace = ?1 \
                         ORDER BY namespace",
                    )
                    .map_err(err)?;
                let docs = stmt
                    .query_map([&namespace], |row| row.get::<_, String>(0))
                    .map_err(err)?
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(err)?;
                docs.iter()
                    .map(|d| crate::vocabulary::decode(d, &inner.name))
                    .collect()
            })
        })
        .await
    }

    async fn update_registration(
        &self,
        namespace: &str,
        component: Option<(String, Vec<u8>)>,
        change: Change,
    ) -> Result<Registration, StoreError> {
        let namespace = namespace.to_string();
        self.blocking(move |inner| {
            inner.write("changing a registration", |tx, now| {
                let err = |e| inner.err("changing a registration", e);
                let current: Option<String> = tx
                    .query_row(
                        "SELECT document FROM registrations WHERE namespace = ?1",
                        [&namespace],
                        |row| row.get(0),
                    )
                    .optional()
                    .map_err(err)?;
                let current = current
                    .map(|d| crate::vocabulary::decode(&d, &inner.name))
                    .transpose()?;
                let next = change(current, now)?;
                if let Some((digest, bytes)) = &component {
                    tx.execute(
                        "INSERT INTO policy_components (digest, component) VALUES (?1, ?2) \
                         ON CONFLICT (digest) DO NOTHING",
                        rusqlite::params![digest, bytes],
                    )
                    .map_err(err)?;
                }
                let revision = i64::try_from(next.revision).unwrap_or(i64::MAX);
                tx.execute(
                    "INSERT INTO registrations (namespace, revision, document) VALUES (?1, ?2, ?3) \
                     ON CONFLICT (namespace) DO UPDATE SET revision = ?2, document = ?3",
                    rusqlite::params![namespace, revision, crate::vocabulary::encode(&next)],
                )
                .map_err(err)?;
                Ok(next)
            })
        })
        .await
    }

    async fn read_component(&self, digest: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let digest = digest.to_string();
        self.blocking(move |inner| {
            inner.read(|conn, _now| {
                conn.query_row(
                    "SELECT component FROM policy_components WHERE digest = ?1",
                    [&digest],
                    |row| row.get(0),
                )
                .optional()
                .map_err(|e| inner.err("reading a policy component", e))
            })
        })
        .await
    }

    async fn read_setting(&self, name: &str) -> Result<Option<String>, StoreError> {
        let name = name.to_string();
        self.blocking(move |inner| {
            inner.read(|conn, _now| {
                conn.query_row(
                    "SELECT value FROM settings WHERE name = ?1",
                    [&name],
                    |row| row.get(0),
                )
                .optional()
                .map_err(|e| inner.err("reading a setting", e))
            })
        })
        .await
    }

    async fn write_setting(&self, name: &str, value: &str) -> Result<(), StoreError> {
        let (name, value) = (name.to_string(), value.to_string());
        self.blocking(move |inner| {
            inner.write("writing a setting", |tx, _now| {
                tx.execute(
                    "INSERT INTO settings (name, value) VALUES (?1, ?2) \
                     ON CONFLICT (name) DO UPDATE SET value = ?2",
                    [&name, &value],
                )
                .map_err(|e| inner.err("writing a setting", e))?;
                Ok(())
            })
        })
        .await
    }
}
