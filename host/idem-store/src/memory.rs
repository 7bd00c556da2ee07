//! The in-memory store: for unit tests and `memory:`. Nothing survives the
//! process.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use idem_core::RecordState;

use crate::machine::{self, ClaimStep, JobStep};
use crate::{
    Claim, ClaimOutcome, ClaimRequest, Holder, JobLease, JobLeaseAcquire, ListFilter, Membership,
    Outcome, OwnershipToken, Record, RecordKey, RecordView, Store, StoreError, StoreOptions,
};

/// A store in a mutex. Each call holds the lock for the whole call (reading
/// the clock included), which makes it one atomic transaction.
#[derive(Debug)]
pub struct MemoryStore {
    options: StoreOptions,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    records: BTreeMap<RecordKey, Record>,
    /// The last fence issued; never goes down, not even on gc.
    last_fence: u64,
    /// Each group's epoch and (normalised) members.
    memberships: BTreeMap<String, (u64, Vec<String>)>,
    /// The last epoch issued, to any group.
    last_epoch: u64,
    /// Job leases by job name.
    job_leases: BTreeMap<String, JobLease>,
}

impl State {
    fn next_fence(&mut self) -> u64 {
        self.last_fence += 1;
        self.last_fence
    }

    /// Refuses a stale ownership token (see `machine::check_epoch`).
    fn check_epoch(&self, token: Option<&OwnershipToken>) -> Result<(), StoreError> {
        let current = token.and_then(|t| self.memberships.get(&t.group).map(|(e, _)| *e));
        machine::check_epoch(token, current)
    }
}

impl MemoryStore {
    /// An empty store.
    pub fn new(options: StoreOptions) -> Self {
        MemoryStore {
            options,
            state: Mutex::new(State::default()),
        }
    }

    /// The lock and the store clock read under it.
    fn lock(&self) -> (MutexGuard<'_, State>, u64) {
        // A panic while holding the lock cannot leave a half-written record
        // (records are replaced whole), so a poisoned lock is safe to reuse.
        let guard = self
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let now = self.options.clock.now_ms();
        (guard, now)
    }
}

#[async_trait]
impl Store for MemoryStore {
    fn describe(&self) -> String {
        "memory:".to_string()
    }

    fn clock(&self) -> &crate::StoreClock {
        &self.options.clock
    }

    async fn claim(&self, request: ClaimRequest) -> Result<ClaimOutcome, StoreError> {
        machine::validate(&request)?;
        let (mut state, now) = self.lock();
        state.check_epoch(request.ownership.as_ref())?;
        match machine::claim(state.records.get(&request.key).cloned(), &request, now) {
            ClaimStep::Existing(existing) => Ok(ClaimOutcome::Existing(existing)),
            ClaimStep::Insert => {
                let fence = state.next_fence();
                let record = machine::new_record(&request, fence, now);
                let claim = machine::claim_of(&record);
                state.records.insert(request.key, record);
                Ok(ClaimOutcome::Claimed(claim))
            }
        }
    }

    async fn take_over_with(
        &self,
        key: &RecordKey,
        observed_fence: u64,
        lease: Duration,
        holder: Holder,
        ownership: Option<&OwnershipToken>,
    ) -> Result<Claim, StoreError> {
        let (mut state, now) = self.lock();
        state.check_epoch(ownership)?;
        let record =
            machine::take_over_check(state.records.get(key).cloned(), key, observed_fence, now)?;
        let fence = state.next_fence();
        let record = machine::taken_over(record, fence, lease, holder, now);
        let claim = machine::claim_of(&record);
        state.records.insert(key.clone(), record);
        Ok(claim)
    }

    async fn mark_unknown(&self, key: &RecordKey, observed_fence: u64) -> Result<(), StoreError> {
        let (mut state, now) = self.lock();
        if let Some(record) =
            machine::mark_unknown(state.records.get(key).cloned(), key, observed_fence, now)?
        {
            state.records.insert(key.clone(), record);
        }
        Ok(())
    }

    async fn complete(
        &self,
        key: &RecordKey,
        fence: u64,
        outcome: Outcome,
    ) -> Result<(), StoreError> {
        let (mut state, now) = self.lock();
        let current = state.records.get(key).cloned();
        let record = machine::finish(
            current,
            key,
            fence,
            RecordState::Completed,
            outcome,
            self.options.max_outcome_bytes,
            now,
        )?;
        state.records.insert(key.clone(), record);
        Ok(())
    }

    async fn fail(
        &self,
        key: &RecordKey,
        fence: u64,
        retryable: bool,
        outcome: Outcome,
    ) -> Result<(), StoreError> {
        let to = machine::failed_state(retryable);
        let (mut state, now) = self.lock();
        let current = state.records.get(key).cloned();
        let record = machine::finish(
            current,
            key,
            fence,
            to,
            outcome,
            self.options.max_outcome_bytes,
            now,
        )?;
        state.records.insert(key.clone(), record);
        Ok(())
    }

    async fn heartbeat(
        &self,
        key: &RecordKey,
        fence: u64,
        lease: Duration,
    ) -> Result<u64, StoreError> {
        let (mut state, now) = self.lock();
        let record = machine::heartbeat(state.records.get(key).cloned(), key, fence, lease, now)?;
        let until = record.lease_until_ms;
        state.records.insert(key.clone(), record);
        Ok(until)
    }

    async fn get(&self, key: &RecordKey) -> Result<Option<RecordView>, StoreError> {
        let (state, now) = self.lock();
        Ok(machine::live(state.records.get(key).cloned(), now).map(|r| RecordView::at(r, now)))
    }

    async fn list(&self, filter: ListFilter) -> Result<Vec<RecordView>, StoreError> {
        let (state, now) = self.lock();
        let mut out: Vec<&Record> = state
            .records
            .values()
            .filter(|r| !machine::is_expired(r, now))
            .filter(|r| {
                filter
                    .namespace
                    .as_ref()
                    .is_none_or(|n| &r.key.namespace == n)
            })
            .filter(|r| filter.partition.as_ref().is_none_or(|p| &r.partition == p))
            .filter(|r| filter.state.is_none_or(|s| r.state == s))
            .collect();
        // Same order as SQLite: most recently updated first, then by key.
        out.sort_by(|a, b| {
            b.updated_ms
                .cmp(&a.updated_ms)
                .then_with(|| a.key.cmp(&b.key))
        });
        let limit = filter.limit.map_or(usize::MAX, |l| l as usize);
        Ok(out
            .into_iter()
            .take(limit)
            .map(|r| RecordView::at(r.clone(), now))
            .collect())
    }

    async fn gc(&self) -> Result<u64, StoreError> {
        let (mut state, now) = self.lock();
        let before = state.records.len();
        state.records.retain(|_, r| !machine::is_expired(r, now));
        Ok((before - state.records.len()) as u64)
    }

    async fn join_membership(
        &self,
        group: &str,
        members: &[String],
    ) -> Result<Membership, StoreError> {
        let members = machine::normalize_members(group, members)?;
        let (mut state, _now) = self.lock();
        let stored = state.memberships.get(group).map(|(_, m)| m.as_slice());
        if machine::membership_changes(stored, &members) {
            state.last_epoch += 1;
            let epoch = state.last_epoch;
            state
                .memberships
                .insert(group.to_string(), (epoch, members));
        }
        let (epoch, members) = state.memberships[group].clone();
        Ok(Membership {
            group: group.to_string(),
            epoch,
            members,
        })
    }

    async fn membership(&self, group: &str) -> Result<Option<Membership>, StoreError> {
        let (state, _now) = self.lock();
        Ok(state
            .memberships
            .get(group)
            .map(|(epoch, members)| Membership {
                group: group.to_string(),
                epoch: *epoch,
                members: members.clone(),
            }))
    }

    async fn acquire_job_lease(
        &self,
        job: &str,
        holder: &str,
        lease: Duration,
    ) -> Result<JobLeaseAcquire, StoreError> {
        machine::check_name("job", job)?;
        machine::check_name("job-lease holder", holder)?;
        let (mut state, now) = self.lock();
        match machine::acquire_job(state.job_leases.get(job).cloned(), now) {
            JobStep::Held(current, remaining_ms) => Ok(JobLeaseAcquire::Held {
                current,
                remaining_ms,
            }),
            JobStep::Take => {
                let taken = JobLease {
                    job: job.to_string(),
                    holder: holder.to_string(),
                    fence: state.next_fence(),
                    lease_until_ms: machine::after(now, lease),
                };
                state.job_leases.insert(job.to_string(), taken.clone());
                Ok(JobLeaseAcquire::Acquired(taken))
            }
        }
    }

    async fn heartbeat_job_lease(
        &self,
        job: &str,
        fence: u64,
        lease: Duration,
    ) -> Result<u64, StoreError> {
        let (mut state, now) = self.lock();
        let mut held = machine::job_held(state.job_leases.get(job).cloned(), job, fence)?;
        held.lease_until_ms = machine::after(now, lease);
        let until = held.lease_until_ms;
        state.job_leases.insert(job.to_string(), held);
        Ok(until)
    }

    async fn release_job_lease(&self, job: &str, fence: u64) -> Result<(), StoreError> {
        let (mut state, _now) = self.lock();
        machine::job_held(state.job_leases.get(job).cloned(), job, fence)?;
        state.job_leases.remove(job);
        Ok(())
    }
}
