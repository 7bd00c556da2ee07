//! Memberships, epochs and job leases on PostgreSQL.

use std::time::Duration;

use async_trait::async_trait;

use super::PostgresStore;
use crate::backend::OwnershipBackend;
use crate::machine;
use crate::vocabulary::StoreError;
use crate::vocabulary::{JobLease, JobLeaseAcquire, Membership};

#[async_trait]
impl OwnershipBackend for PostgresStore {
    async fn join(&self, group: &str, members: Vec<String>) -> Result<Membership, StoreError> {
        let inner = &self.inner;
        let (manual, offset) = inner.clock();
        let rows = inner
            .query(
                "joining a membership",
                &inner.sql.join,
                &[&group, &members, &manual, &offset],
            )
            .await?;
        let row = rows
            .first()
            .ok_or_else(|| inner.corrupt("the membership upsert returned no row".into()))?;
        Ok(Membership {
            group: group.to_string(),
            epoch: inner.unsigned(row.get(0), "an epoch")?,
            members: row.get(1),
        })
    }

    async fn read_membership(&self, group: &str) -> Result<Option<Membership>, StoreError> {
        let inner = &self.inner;
        let rows = inner
            .query("reading a membership", &inner.sql.membership, &[&group])
            .await?;
        rows.first()
            .map(|row| {
                Ok(Membership {
                    group: group.to_string(),
                    epoch: inner.unsigned(row.get(0), "an epoch")?,
                    members: row.get(1),
                })
            })
            .transpose()
    }

    async fn acquire_job(
        &self,
        job: &str,
        holder: &str,
        lease: Duration,
    ) -> Result<JobLeaseAcquire, StoreError> {
        let inner = &self.inner;
        let (manual, offset) = inner.clock();
        let lease_ms = i64::try_from(machine::millis(lease)).unwrap_or(i64::MAX);
        // Read the lease and the clock, let the machine decide, then take
        // it only if the row is still what was read; a row that changed in
        // between (released, taken, renewed) is read and decided again.
        let mut retries = inner.retries("acquiring a job lease", "attempts racing other holders");
        loop {
            let rows = inner
                .query(
                    "reading a job lease",
                    &inner.sql.job_get,
                    &[&job, &manual, &offset],
                )
                .await?;
            let row = rows
                .first()
                .ok_or_else(|| inner.corrupt("the clock query returned no row".into()))?;
            let now = inner.unsigned(row.get(0), "the clock")?;
            let observed: Option<i64> = row.get(2);
            let current = match row.get::<_, Option<String>>(1) {
                Some(holder) => Some(JobLease {
                    job: job.to_string(),
                    holder,
                    fence: inner.unsigned(row.get(2), "a job-lease fence")?,
                    lease_until_ms: inner.unsigned(row.get(3), "a job lease's end")?,
                }),
                None => None,
            };
            match machine::acquire_job(current, now) {
                machine::JobStep::Held(current, remaining_ms) => {
                    return Ok(JobLeaseAcquire::Held {
                        current,
                        remaining_ms,
                    });
                }
                machine::JobStep::Take => {
                    let rows = inner
                        .query(
                            "acquiring a job lease",
                            &inner.sql.job_acquire,
                            &[&job, &holder, &manual, &offset, &lease_ms, &observed],
                        )
                        .await?;
                    if let Some(row) = rows.first() {
                        return Ok(JobLeaseAcquire::Acquired(JobLease {
                            job: job.to_string(),
                            holder: holder.to_string(),
                            fence: inner.unsigned(row.get(0), "a job-lease fence")?,
                            lease_until_ms: inner.unsigned(row.get(1), "a job lease's end")?,
                        }));
                    }
                }
            }
            retries.again()?;
        }
    }

    async fn heartbeat_job(
        &self,
        job: &str,
        fence: u64,
        lease: Duration,
    ) -> Result<u64, StoreError> {
        let inner = &self.inner;
        let (manual, offset) = inner.clock();
        let lease_ms = i64::try_from(machine::millis(lease)).unwrap_or(i64::MAX);
        let fence_param = i64::try_from(fence).unwrap_or(i64::MAX);
        let rows = inner
            .query(
                "heartbeating a job lease",
                &inner.sql.job_heartbeat,
                &[&job, &fence_param, &manual, &offset, &lease_ms],
            )
            .await?;
        match rows.first() {
            Some(row) => inner.unsigned(row.get(0), "a job lease's end"),
            None => Err(StoreError::JobLeaseLost {
                job: job.to_string(),
                fence,
            }),
        }
    }

    async fn release_job(&self, job: &str, fence: u64) -> Result<(), StoreError> {
        let inner = &self.inner;
        let fence_param = i64::try_from(fence).unwrap_or(i64::MAX);
        let fail = |e| inner.err("releasing a job lease", e);
        let conn = inner.conn().await?;
        let statement = conn
            .prepare_cached(&inner.sql.job_release)
            .await
            .map_err(fail)?;
        match conn.execute(&statement, &[&job, &fence_param]).await {
            Ok(0) => Err(StoreError::JobLeaseLost {
                job: job.to_string(),
                fence,
            }),
            Ok(_) => Ok(()),
            Err(e) => Err(fail(e)),
        }
    }
}
