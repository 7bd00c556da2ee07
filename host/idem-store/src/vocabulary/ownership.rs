//! Memberships, their epochs, and job leases.

/// Proof of ownership under a membership: the group and the epoch that
/// [`Ownership::join_membership`](crate::Ownership::join_membership) returned.
///
/// A worker computes what it owns from a membership, then carries the
/// membership's epoch on every claim and take-over. Once the membership
/// changes, the epoch moves on and the store refuses the old one: a worker
/// that was deposed while paused cannot start an effect when it wakes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OwnershipToken {
    /// The group (e.g. the job name).
    pub group: String,
    /// The epoch the worker's view of the membership has.
    pub epoch: u64,
}

/// A group's registered membership.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Membership {
    /// The group.
    pub group: String,
    /// The group's current epoch: a value of a store-wide sequence, so it
    /// only ever increases, and it changes exactly when the members do.
    pub epoch: u64,
    /// The members, sorted and without repeats.
    pub members: Vec<String>,
}

impl Membership {
    /// The token that proves a claim is made under this membership.
    pub fn token(&self) -> OwnershipToken {
        OwnershipToken {
            group: self.group.clone(),
            epoch: self.epoch,
        }
    }
}

/// A job-level lease: who runs a whole job right now.
///
/// An efficiency measure only (two whole runs need not both do the work);
/// correctness never depends on it: every operation is still claimed and
/// fenced on its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobLease {
    /// The job's name.
    pub job: String,
    /// Who holds it (free text, e.g. host, pid and run id).
    pub holder: String,
    /// The lease's fence, from the store-wide fence sequence; hand it back
    /// to heartbeat or release.
    pub fence: u64,
    /// When the lease ends, store clock (ms since the epoch).
    pub lease_until_ms: u64,
}

// Exhaustive on purpose (not `#[non_exhaustive]`): the caller holds the lease or another does.
/// What [`Ownership::acquire_job_lease`](crate::Ownership::acquire_job_lease) got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobLeaseAcquire {
    /// The caller holds the job lease.
    Acquired(JobLease),
    /// Another holder's lease is live.
    Held {
        /// The live lease.
        current: JobLease,
        /// How long it has left, store clock.
        remaining_ms: u64,
    },
}
