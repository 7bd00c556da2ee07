//! Ownership: names, memberships and their epochs, job leases.

use crate::{JobLease, OwnershipToken, StoreError};

/// Longest group, member, job or job-holder name, in bytes.
pub(crate) const MAX_NAME_BYTES: usize = 256;

/// Checks a group, member, job or holder name: non-empty, at most
/// [`MAX_NAME_BYTES`], no control characters (so that a store may join
/// names with a newline).
pub(crate) fn check_name(what: &str, name: &str) -> Result<(), StoreError> {
    if name.is_empty() || name.len() > MAX_NAME_BYTES || name.chars().any(char::is_control) {
        return Err(StoreError::InvalidRequest(format!(
            "{what} `{}` must be 1 to {MAX_NAME_BYTES} bytes without control characters",
            name.escape_debug()
        )));
    }
    Ok(())
}

/// A membership as every store keeps it: sorted, without repeats, at
/// least one member, every name checked. Order and repeats carry no
/// meaning for ownership ([`idem_core::ownership::owner`]), so two workers
/// listing the same members differently register the same membership.
pub(crate) fn normalize_members(
    group: &str,
    members: &[String],
) -> Result<Vec<String>, StoreError> {
    check_name("group", group)?;
    if members.is_empty() {
        return Err(StoreError::InvalidRequest(format!(
            "the membership of group `{group}` has no members"
        )));
    }
    for m in members {
        check_name("member", m)?;
    }
    let mut sorted = members.to_vec();
    sorted.sort();
    sorted.dedup();
    Ok(sorted)
}

/// Whether joining with `members` (normalised) changes what is stored, i.e.
/// needs a new epoch.
pub(crate) fn membership_changes(stored: Option<&[String]>, members: &[String]) -> bool {
    stored != Some(members)
}

/// Checks a claim's or take-over's ownership token against the group's
/// current epoch (`None` when the group has no membership). Any epoch but
/// the current one is refused: an older one was superseded, and a newer one
/// (or one for a group with no membership) was never issued by this store.
pub(crate) fn check_epoch(
    token: Option<&OwnershipToken>,
    current: Option<u64>,
) -> Result<(), StoreError> {
    match token {
        Some(t) if current != Some(t.epoch) => Err(StoreError::StaleEpoch {
            group: t.group.clone(),
            epoch: t.epoch,
            current: current.unwrap_or(0),
        }),
        _ => Ok(()),
    }
}

/// What acquiring a job lease does with the current one.
pub(crate) enum JobStep {
    /// No live lease: allocate a fence and take it.
    Take,
    /// A live lease, and how long it has left.
    Held(JobLease, u64),
}

/// Decides a job-lease acquisition: a lease whose end is at or before now
/// is over (the same rule as a record's lease).
pub(crate) fn acquire_job(current: Option<JobLease>, now_ms: u64) -> JobStep {
    match current {
        Some(lease) if lease.lease_until_ms > now_ms => {
            let left = lease.lease_until_ms - now_ms;
            JobStep::Held(lease, left)
        }
        _ => JobStep::Take,
    }
}

/// The job lease held under `fence`, else [`StoreError::JobLeaseLost`]. As
/// for records, the fence decides, not the lease: an expired lease nobody
/// took may still be heartbeated or released.
pub(crate) fn job_held(
    current: Option<JobLease>,
    job: &str,
    fence: u64,
) -> Result<JobLease, StoreError> {
    match current {
        Some(lease) if lease.fence == fence => Ok(lease),
        _ => Err(StoreError::JobLeaseLost {
            job: job.to_string(),
            fence,
        }),
    }
}
