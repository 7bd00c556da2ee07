//! Partitioned ownership: which of the job's operations this worker runs.
//!
//! The run registers the group's membership and gets its *ownership epoch*,
//! which moves whenever the membership changes; every claim carries it, and
//! the store refuses a claim under a superseded epoch, so a worker deposed
//! while paused cannot start an effect when it wakes. Which worker owns a
//! partition is rendezvous hashing ([`idem_core::ownership`]).

use std::sync::Arc;

use idem_core::{KeyedDerivation, Operation};
use idem_store::{OwnershipToken, Store};

use super::error::JobError;

/// The workers sharing a job, and which one this run is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ownership {
    /// The group whose membership and epoch the workers share (the CLI
    /// defaults it to the policy's namespace).
    pub group: String,
    /// Every worker of the group. Start every worker with the same list: a
    /// run registers its list, so an older list deposes the others.
    pub members: Vec<String>,
    /// This worker: one of `members`.
    pub member: String,
}

impl Ownership {
    /// `shard` of `count` workers named `0`..`count-1`, as `--shard I/N`.
    pub fn shard(group: impl Into<String>, shard: u32, count: u32) -> Self {
        Ownership {
            group: group.into(),
            members: idem_core::ownership::shard_members(count),
            member: shard.to_string(),
        }
    }
}

/// Registers the membership, keeps the operations this worker owns under
/// it, and returns the token every claim must carry and how many were
/// someone else's.
pub(crate) async fn claim_share(
    store: &Arc<dyn Store>,
    ownership: &Ownership,
    derived: &mut Vec<(Operation, KeyedDerivation)>,
) -> Result<(OwnershipToken, u64), JobError> {
    let group = &ownership.group;
    let joined = store
        .join_membership(group, &ownership.members)
        .await
        .map_err(|error| JobError::Membership {
            group: group.clone(),
            error,
        })?;
    tracing::info!(group = %group, epoch = joined.epoch, member = %ownership.member, "joined");
    // Ownership from the membership the store returned: the one the epoch
    // stands for.
    let before = derived.len();
    derived.retain(|(_, keyed)| {
        idem_core::ownership::owns(&keyed.partition, &ownership.member, &joined.members)
    });
    let not_owned = (before - derived.len()) as u64;
    Ok((joined.token(), not_owned))
}
