//! Namespace registrations, kept components and settings on PostgreSQL.
//!
//! A registration changes by compare-and-swap on its revision: read the
//! document and the store clock, decide (`registry::activate` or
//! `rollback`, pure), then one conditional statement writes it (and keeps
//! the component, only when the write won). A write that lost to another
//! changed nothing, and the call decides again on what won.

use async_trait::async_trait;

use super::PostgresStore;
use crate::backend::RegistryBackend;
use crate::machine::Change;
use crate::vocabulary::Registration;
use crate::vocabulary::StoreError;

#[async_trait]
impl RegistryBackend for PostgresStore {
    async fn read_registrations(
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
            .map(|d| crate::vocabulary::decode(d, &inner.name))
            .collect()
    }

    async fn update_registration(
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
                .map(|d| crate::vocabulary::decode(&d, &inner.name))
                .transpose()?;
            let next = change(current, now)?;
            let next_revision = i64::try_from(next.revision).unwrap_or(i64::MAX);
            let document = crate::vocabulary::encode(&next);
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

    async fn read_component(&self, digest: &str) -> Result<Option<Vec<u8>>, StoreError> {
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

    async fn read_setting(&self, name: &str) -> Result<Option<String>, StoreError> {
        let inner = &self.inner;
        let rows = inner
            .query("reading a setting", &inner.sql.registry.setting, &[&name])
            .await?;
        Ok(rows.first().map(|r| r.get(0)))
    }

    async fn write_setting(&self, name: &str, value: &str) -> Result<(), StoreError> {
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
