//! Partitioned ownership: which of the job's operations this worker runs.
//!
//! The run registers the group's membership and gets its *ownership epoch*,
//! which moves whenever the membership changes; every claim carries it, and
//! the store refuses a claim under a superseded epoch, so a worker deposed
//! while paused cannot start an effect when it wakes. Which worker owns a
//! partition is rendezvous hashing ([`idem_core::ownership`]).

use idem_store::{OwnershipToken, Store};

use super::error::JobError;
use crate::engine::Engine;

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

    /// The members as a sorted set: what the store registers.
    fn set(&self) -> Vec<String> {
        let mut set = self.members.clone();
        set.sort();
        set.dedup();
        set
    }
}

/// Registers the membership and returns the token every claim must carry.
/// The runner chose this worker's share from the members asked for, while
/// it checked the operations; rendezvous hashing ignores order and
/// repeats, so the share holds exactly when the store registered the same
/// set, which is checked here.
pub(crate) async fn join(store: &Store, ownership: &Ownership) -> Result<OwnershipToken, JobError> {
    let group = &ownership.group;
    let joined = store
        .ownership()
        .join_membership(group, &ownership.members)
        .await
        .map_err(|error| JobError::Membership {
            group: group.clone(),
            error,
        })?;
    tracing::info!(group = %group, epoch = joined.epoch, member = %ownership.member, "joined");
    let mut held = joined.members.clone();
    held.sort();
    held.dedup();
    if held != ownership.set() {
        return Err(JobError::MembershipMismatch {
            group: group.clone(),
            asked: ownership.set(),
            held,
        });
    }
    Ok(joined.token())
}

/// `engine` as a member of `ownership`'s group ([`join`]): every claim it
/// makes carries the epoch; without an ownership, `engine` as it is.
pub(crate) async fn joined(
    engine: &Engine,
    ownership: Option<&Ownership>,
) -> Result<Engine, JobError> {
    let Some(ownership) = ownership else {
        return Ok(engine.clone());
    };
    let mut options = engine.options().clone();
    options.ownership = Some(join(engine.store(), ownership).await?);
    Ok(engine.reconfigured(options))
}
