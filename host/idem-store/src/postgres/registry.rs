//! Namespace registrations, kept components and settings on PostgreSQL.
//!
//! A registration changes by compare-and-swap on its revision: read the
//! document and the store clock, decide (`registry::activate` or
//! `rollback`, pure), then one conditional statement writes it (and keeps
//! the component, only when the write won). A write that lost to another
//! changed nothing, and the call decides again on what won.

use async_trait::async_trait;

use super::PostgresStore;
use super::sql::NOW;
use crate::error::StoreError;
use crate::registry::{self, Change, Registration};

/// The statements, for the quoted schema `s`.
#[derive(Debug)]
pub(super) struct RegistrySql {
    read_one: String,
    read_all: String,
    insert: String,
    update: String,
    component: String,
    setting: String,
    set_setting: String,
}

impl RegistrySql {
    pub(super) fn new(s: &str) -> Self {
        // The clock at $2/$3.
        let now23 = NOW.replace("$2", "$3").replace("$1", "$2");
        // Keeps the component ($4 digest, $5 bytes; NULL: none) only when
        // the registration write `w` happened.
        let keep = format!(
            "c AS (INSERT INTO {s}.policy_components (digest, component) \
             SELECT $4::text, $5::bytea FROM w WHERE $4::text IS NOT NULL \
             ON CONFLICT (digest) DO NOTHING)"
        );
        RegistrySql {
            read_one: format!(
                "SELECT n.ms, r.revision, r.document FROM (SELECT {now23} AS ms) n \
                 LEFT JOIN {s}.registrations r ON r.namespace = $1::text"
            ),
            read_all: format!(
                "SELECT document FROM {s}.registrations ORDER BY namespace COLLATE \"C\""
            ),
            insert: format!(
                "WITH w AS (INSERT INTO {s}.registrations (namespace, revision, document) \
                   VALUES ($1::text, $2::int8, $3::text) ON CONFLICT (namespace) DO NOTHING \
                   RETURNING 1), {keep} SELECT count(*)::int8 FROM w"
            ),
            update: format!(
                "WITH w AS (UPDATE {s}.registrations SET revision = $2::int8, document = $3::text \
                   WHERE namespace = $1::text AND revision = $6::int8 RETURNING 1), {keep} \
                 SELECT count(*)::int8 FROM w"
            ),
            component: format!("SELECT component FROM {s}.policy_components WHERE digest = $1"),
            setting: format!("SELECT value FROM {s}.settings WHERE name = $1"),
            set_setting: format!(
                "INSERT INTO {s}.settings (name, value) VALUES ($1, $2) \
                 ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value"
            ),
        }
    }

    /// Every statement, named (for the schema-interpolation test).
    #[cfg(test)]
    pub(super) fn statements(&self) -> Vec<(&'static str, &str)> {
        vec![
            ("registry.read_one", self.read_one.as_str()),
            ("registry.read_all", self.read_all.as_str()),
            ("registry.insert", self.insert.as_str()),
            ("registry.update", self.update.as_str()),
            ("registry.component", self.component.as_str()),
            ("registry.setting", self.setting.as_str()),
            ("registry.set_setting", self.set_setting.as_str()),
        ]
    }
}

/// The backend's registry calls (see `RecordBackend`).
#[async_trait]
pub(super) trait RegistryCalls {
    async fn registrations_pg(
        &self,
        namespace: Option<&str>,
    ) -> Result<Vec<Registration>, StoreError>;
    async fn update_pg(
        &self,
        namespace: &str,
        component: Option<(String, Vec<u8>)>,
        change: Change,
    ) -> Result<Registration, StoreError>;
    async fn component_pg(&self, digest: &str) -> Result<Option<Vec<u8>>, StoreError>;
    async fn setting_pg(&self, name: &str) -> Result<Option<String>, StoreError>;
    async fn set_setting_pg(&self, name: &str, value: &str) -> Result<(), StoreError>;
}

#[async_trait]
impl RegistryCalls for PostgresStore {
    async fn registrations_pg(
        &self,
        namespace: Option<&str>,
    ) -> Result<Vec<Registration>, StoreError> {
        let inner = &self.inner;
        let sql = &inner.sql.registry;
        let docs: Vec<String> = match namespace {
            Some(n) => {
                let (manual, offset) = inner.clock();
                let rows = inner
                    .query(
                        "reading a registration",
                        &sql.read_one,
                        &[&n, &manual, &offset],
                    )
                    .await?;
                rows.iter()
                    .filter_map(|r| r.get::<_, Option<String>>(2))
                    .collect()
            }
            None => inner
                .query("reading registrations", &sql.read_all, &[])
                .await?
                .iter()
                .map(|r| r.get(0))
                .collect(),
        };
        docs.iter()
            .map(|d| registry::decode(d, &inner.name))
            .collect()
    }

    async fn update_pg(
        &self,
        namespace: &str,
        component: Option<(String, Vec<u8>)>,
        change: Change,
    ) -> Result<Registration, StoreError> {
        let inner = &self.inner;
        let sql = &inner.sql.registry;
        let (manual, offset) = inner.clock();
        let (digest, bytes) = match component {
            Some((d, b)) => (Some(d), Some(b)),
            None => (None, None),
        };
        let mut retries = inner.retries("changing a registration", "racing registry changes");
        loop {
            let rows = inner
                .query(
                    "reading a registration",
                    &sql.read_one,
                    &[&namespace, &manual, &offset],
                )
                .await?;
            let row = rows
                .first()
                .ok_or_else(|| inner.corrupt("the clock query returned no row".into()))?;
            let now = inner.unsigned(row.get(0), "the clock")?;
            let revision: Option<i64> = row.get(1);
            let current = row
                .get::<_, Option<String>>(2)
                .map(|d| registry::decode(&d, &inner.name))
                .transpose()?;
            let next = change(current, now)?;
            let next_revision = i64::try_from(next.revision).unwrap_or(i64::MAX);
            let document = registry::encode(&next);
            let written = match revision {
                None => {
                    inner
                        .query(
                            "registering a namespace",
                            &sql.insert,
                            &[&namespace, &next_revision, &document, &digest, &bytes],
                        )
                        .await?
                }
                Some(read) => {
                    inner
                        .query(
                            "changing a registration",
                            &sql.update,
                            &[
                                &namespace,
                                &next_revision,
                                &document,
                                &digest,
                                &bytes,
                                &read,
                            ],
                        )
                        .await?
                }
            };
            let count: i64 = written.first().map(|r| r.get(0)).unwrap_or(0);
            if count == 1 {
                return Ok(next);
            }
            retries.again()?;
        }
    }

    async fn component_pg(&self, digest: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let inner = &self.inner;
        let rows = inner
            .query(
                "reading a policy component",
                &inner.sql.registry.component,
                &[&digest],
            )
            .await?;
        Ok(rows.first().map(|r| r.get(0)))
    }

    async fn setting_pg(&self, name: &str) -> Result<Option<String>, StoreError> {
        let inner = &self.inner;
        let rows = inner
            .query("reading a setting", &inner.sql.registry.setting, &[&name])
            .await?;
        Ok(rows.first().map(|r| r.get(0)))
    }

    async fn set_setting_pg(&self, name: &str, value: &str) -> Result<(), StoreError> {
        let inner = &self.inner;
        inner
            .query(
                "writing a setting",
                &inner.sql.registry.set_setting,
                &[&name, &value],
            )
            .await?;
        Ok(())
    }
}
