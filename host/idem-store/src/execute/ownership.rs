//! [`Ownership`] for every backend: names and members checked, then kept.

use std::time::Duration;

use async_trait::async_trait;

use crate::backend::OwnershipBackend;
use crate::machine;
use crate::port::Ownership;
use crate::vocabulary::StoreError;
use crate::vocabulary::{JobLeaseAcquire, Membership};

#[async_trait]
impl<B: OwnershipBackend> Ownership for B {
    async fn join_membership(
        &self,
        group: &str,
        members: &[String],
    ) -> Result<Membership, StoreError> {
        let members = machine::normalize_members(group, members)?;
        self.join(group, members).await
    }

    async fn membership(&self, group: &str) -> Result<Option<Membership>, StoreError> {
        self.read_membership(group).await
    }

    async fn acquire_job_lease(
        &self,
        job: &str,
        holder: &str,
        lease: Duration,
    ) -> Result<JobLeaseAcquire, StoreError> {
        machine::check_name("job", job)?;
        machine::check_name("job-lease holder", holder)?;
        self.acquire_job(job, holder, lease).await
    }

    async fn heartbeat_job_lease(
        &self,
        job: &str,
        fence: u64,
        lease: Duration,
    ) -> Result<u64, StoreError> {
        self.heartbeat_job(job, fence, lease).await
    }

    async fn release_job_lease(&self, job: &str, fence: u64) -> Result<(), StoreError> {
        self.release_job(job, fence).await
    }
}
