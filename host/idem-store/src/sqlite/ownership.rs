//! Memberships, epochs and job leases in a SQLite file.

use std::time::Duration;

use async_trait::async_trait;

use super::connection::SqliteStore;
use crate::backend::OwnershipBackend;
use crate::machine::{self, JobStep};
use crate::vocabulary::StoreError;
use crate::vocabulary::{JobLease, JobLeaseAcquire, Membership};

#[async_trait]
impl OwnershipBackend for SqliteStore {
    async fn join(&self, group: &str, members: Vec<String>) -> Result<Membership, StoreError> {
        let group = group.to_string();
        self.blocking(move |inner| {
            inner.write("joining a membership", |tx, now| {
                let stored = inner.load_membership(tx, &group)?;
                let epoch = match &stored {
                    Some((epoch, stored))
                        if !machine::membership_changes(Some(stored), &members) =>
                    {
                        *epoch
                    }
                    // The new epoch and the new members commit together.
                    _ => {
                        let epoch = inner.next_epoch(tx)?;
                        inner.save_membership(tx, &group, epoch, &members, now)?;
                        epoch
                    }
                };
                Ok(Membership {
                    group,
                    epoch,
                    members,
                })
            })
        })
        .await
    }

    async fn read_membership(&self, group: &str) -> Result<Option<Membership>, StoreError> {
        let group = group.to_string();
        self.blocking(move |inner| {
            inner.read(|conn, _now| {
                Ok(inner
                    .load_membership(conn, &group)?
                    .map(|(epoch, members)| Membership {
                        group,
                        epoch,
                        members,
                    }))
            })
        })
        .await
    }

    async fn acquire_job(
        &self,
        job: &str,
        holder: &str,
        lease: Duration,
    ) -> Result<JobLeaseAcquire, StoreError> {
        let (job, holder) = (job.to_string(), holder.to_string());
        self.blocking(move |inner| {
            inner.write(
                "acquiring a job lease",
                |tx, now| match machine::acquire_job(inner.load_job(tx, &job)?, now) {
                    JobStep::Held(current, remaining_ms) => Ok(JobLeaseAcquire::Held {
                        current,
                        remaining_ms,
                    }),
                    JobStep::Take => {
                        let taken = JobLease {
                            fence: inner.next_fence(tx)?,
                            lease_until_ms: machine::after(now, lease),
                            job,
                            holder,
                        };
                        inner.save_job(tx, &taken)?;
                        Ok(JobLeaseAcquire::Acquired(taken))
                    }
                },
            )
        })
        .await
    }

    async fn heartbeat_job(
        &self,
        job: &str,
        fence: u64,
        lease: Duration,
    ) -> Result<u64, StoreError> {
        let job = job.to_string();
        self.blocking(move |inner| {
            inner.write("heartbeating a job lease", |tx, now| {
                let mut held = machine::job_held(inner.load_job(tx, &job)?, &job, fence)?;
                held.lease_until_ms = machine::after(now, lease);
                inner.save_job(tx, &held)?;
                Ok(held.lease_until_ms)
            })
        })
        .await
    }

    async fn release_job(&self, job: &str, fence: u64) -> Result<(), StoreError> {
        let job = job.to_string();
        self.blocking(move |inner| {
            inner.write("releasing a job lease", |tx, _now| {
                machine::job_held(inner.load_job(tx, &job)?, &job, fence)?;
                tx.execute("DELETE FROM job_leases WHERE job = ?1", [&job])
                    .map_err(|e| inner.err("releasing a job lease", e))?;
                Ok(())
            })
        })
        .await
    }
}
