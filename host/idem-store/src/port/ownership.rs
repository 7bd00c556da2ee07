//! [`Ownership`]: who owns which effects, and who runs a job.

use std::time::Duration;

use async_trait::async_trait;

use crate::vocabulary::StoreError;
use crate::vocabulary::{JobLeaseAcquire, Membership};

/// Partitioned ownership and job leases.
///
/// Each group (e.g. a job) has a registered membership and an epoch, a
/// store-wide monotonic sequence that moves, in the same transaction,
/// exactly when the membership changes. A claim or take-over carrying an
/// [`crate::OwnershipToken`] that is not the group's current epoch is
/// [`StoreError::StaleEpoch`]. A job lease gives one live holder per job
/// name, by the store clock: an efficiency measure, never what
/// correctness rests on.
#[async_trait]
pub trait Ownership: Send + Sync + 'static {
    /// Registers `members` as the membership of `group` and returns the
    /// group's membership. When the members (as a set) differ from the
    /// stored ones, or the group has none yet, the group gets a new epoch
    /// from a store-wide monotonic sequence, in the same transaction;
    /// otherwise the stored epoch is returned unchanged, so that workers
    /// joining with the same view agree on it. Members must be non-empty
    /// names without control characters ([`StoreError::InvalidRequest`]).
    async fn join_membership(
        &self,
        group: &str,
        members: &[String],
    ) -> Result<Membership, StoreError>;

    /// The membership of `group`, if one was registered.
    async fn membership(&self, group: &str) -> Result<Option<Membership>, StoreError>;

    /// Takes the job lease `job` for `lease` (store clock) under a new fence,
    /// unless another holder's lease is live ([`JobLeaseAcquire::Held`]).
    /// A lease that expired, or was released, is taken.
    async fn acquire_job_lease(
        &self,
        job: &str,
        holder: &str,
        lease: Duration,
    ) -> Result<JobLeaseAcquire, StoreError>;

    /// Extends the job lease held under `fence` to store-now + `lease`;
    /// returns the new `lease_until_ms`. [`StoreError::JobLeaseLost`] when
    /// someone else took it (or it was released).
    async fn heartbeat_job_lease(
        &self,
        job: &str,
        fence: u64,
        lease: Duration,
    ) -> Result<u64, StoreError>;

    /// Releases the job lease held under `fence`, so the next run need not
    /// wait for it to expire. [`StoreError::JobLeaseLost`] when it is no
    /// longer held under `fence`.
    async fn release_job_lease(&self, job: &str, fence: u64) -> Result<(), StoreError>;
}
