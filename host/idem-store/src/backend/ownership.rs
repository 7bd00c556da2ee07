//! The ownership port beneath [`crate::Ownership`].

use std::time::Duration;

use async_trait::async_trait;

use crate::vocabulary::StoreError;
use crate::vocabulary::{JobLeaseAcquire, Membership};

/// How a backend keeps memberships and job leases. [`crate::Ownership`] is
/// implemented once for every `OwnershipBackend` (`execute/ownership.rs`),
/// which checks names and members first.
#[async_trait]
pub trait OwnershipBackend: Send + Sync + 'static {
    /// Registers `members` (normalised: sorted, unique, checked) for
    /// `group` (checked), moving the epoch only when they change.
    async fn join(&self, group: &str, members: Vec<String>) -> Result<Membership, StoreError>;

    /// The membership of `group`.
    async fn read_membership(&self, group: &str) -> Result<Option<Membership>, StoreError>;

    /// Takes the job lease (names checked) unless a live one is held.
    async fn acquire_job(
        &self,
        job: &str,
        holder: &str,
        lease: Duration,
    ) -> Result<JobLeaseAcquire, StoreError>;

    /// Extends the job lease held under `fence`.
    async fn heartbeat_job(
        &self,
        job: &str,
        fence: u64,
        lease: Duration,
    ) -> Result<u64, StoreError>;

    /// Releases the job lease held under `fence`.
    async fn release_job(&self, job: &str, fence: u64) -> Result<(), StoreError>;
}
