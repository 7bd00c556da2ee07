//! The in-memory store: for unit tests and `memory:`. Nothing survives the
//! process.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;

use crate::backend::{
    Call, Decide, Fences, GateBackend, GateDecide, OwnershipBackend, RecordBackend, RegistryBackend,
};
use crate::machine::Change;
use crate::machine::{self, JobStep};
use crate::vocabulary::Registration;
use crate::vocabulary::StoreError;
use crate::vocabulary::{AttemptEntry, AttemptFilter};
use crate::vocabulary::{GateEntry, GateState, Holder};
use crate::vocabulary::{
    JobLease, JobLeaseAcquire, ListFilter, Membership, OwnershipToken, Record, RecordKey,
    StoreOptions,
};

/// A store in a mutex. Each call holds the lock for the whole call (reading
/// the clock included), which makes it one atomic transaction.
#[derive(Debug)]
pub struct MemoryStore {
    options: StoreOptions,
    state: Mutex<State>,
    /// The gate's entries by gate and key (`crate::Gates`): a lock of
    /// their own, since no gate call touches a record.
    gates: Mutex<BTreeMap<(String, String), GateEntry>>,
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
    /// The attempt log, in id order.
    attempts: Vec<AttemptEntry>,
    /// The last attempt-log id issued.
    last_attempt: u64,
    /// Namespace registrations by namespace.
    registrations: BTreeMap<String, Registration>,
    /// Policy components by digest.
    components: BTreeMap<String, Vec<u8>>,
    /// Store-wide settings.
    settings: BTreeMap<String, String>,
}

impl State {
    fn next_fence(&mut self) -> u64 {
        self.last_fence += 1;
        self.last_fence
    }

    /// Appends `entry` under the next id, at `at_ms`.
    fn append(&mut self, mut entry: AttemptEntry, at_ms: u64) {
        self.last_attempt += 1;
        entry.id = self.last_attempt;
        entry.at_ms = at_ms;
        // As the SQL stores keep it: who, never which attempt.
        entry.holder = entry.holder.as_ref().map(Holder::provenance);
        self.attempts.push(entry);
    }

    /// Refuses a stale ownership token (see `machine::check_epoch`).
    fn check_epoch(&self, token: Option<&OwnershipToken>) -> Result<(), StoreError> {
        let current = token.and_then(|t| self.memberships.get(&t.group).map(|(e, _)| *e));
        machine::check_epoch(token, current)
    }
}

impl Fences for State {
    fn next_fence(&mut self) -> Result<u64, StoreError> {
        Ok(State::next_fence(self))
    }
}

impl MemoryStore {
    /// An empty store.
    pub fn new(options: StoreOptions) -> Self {
        MemoryStore {
            options,
            state: Mutex::new(State::default()),
            gates: Mutex::new(BTreeMap::new()),
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
impl RecordBackend for MemoryStore {
    fn name(&self) -> &str {
        "memory:"
    }

    fn options(&self) -> &StoreOptions {
        &self.options
    }

    async fn transact<T: Send + 'static>(
        &self,
        call: Call,
        mut decide: Decide<T>,
    ) -> Result<T, StoreError> {
        let (mut state, now) = self.lock();
        state.check_epoch(call.ownership.as_ref())?;
        let current = state.records.get(&call.key).cloned();
        let step = decide(current, now, &mut *state)?;
        let alone = step.record.is_none();
        if let Some(record) = step.record {
            state.records.insert(call.key, *record);
        }
        if let Some(entry) = step.entry.filter(|_| self.options.attempt_log) {
            // An entry alone is a refused late write: once per key, fence
            // and reason, as the SQL stores keep it.
            let logged = alone
                && state.attempts.iter().any(|e| {
                    (&e.key, e.fence, e.event, &e.detail)
                        == (&entry.key, entry.fence, entry.event, &entry.detail)
                });
            if !logged {
                state.append(entry, now);
            }
        }
        step.answer
    }

    async fn read(&self, key: &RecordKey) -> Result<(Option<Record>, u64), StoreError> {
        let (state, now) = self.lock();
        Ok((state.records.get(key).cloned(), now))
    }

    async fn read_many(&self, filter: &ListFilter) -> Result<(Vec<Record>, u64), StoreError> {
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
            .filter(|r| filter.within(r))
            .collect();
        // The order every store lists in: most recently updated first, then
        // by key.
        out.sort_by(|a, b| {
            b.updated_ms
                .cmp(&a.updated_ms)
                .then_with(|| a.key.cmp(&b.key))
        });
        let limit = filter.backend_limit().map_or(usize::MAX, |l| l as usize);
        Ok((out.into_iter().take(limit).cloned().collect(), now))
    }

    async fn collect_garbage(&self, limit: u32) -> Result<u64, StoreError> {
        let (mut state, now) = self.lock();
        let victims: Vec<RecordKey> = state
            .records
            .iter()
            .filter(|(_, r)| machine::is_expired(r, now))
            .map(|(k, _)| k.clone())
            .take(limit as usize)
            .collect();
        let State {
            records, attempts, ..
        } = &mut *state;
        for key in &victims {
            records.remove(key);
        }
        attempts.retain(|a| records.contains_key(&a.key));
        Ok(victims.len() as u64)
    }

    async fn append(&self, entries: Vec<AttemptEntry>) -> Result<(), StoreError> {
        let (mut state, _now) = self.lock();
        if !self.options.attempt_log {
            return Ok(());
        }
        // An answer about a record gc removed meanwhile goes with the
        // record's own entries (`Records::log_answers`).
        for entry in entries {
            if state.records.contains_key(&entry.key) {
                let at = entry.at_ms;
                state.append(entry, at);
            }
        }
        Ok(())
    }

    async fn read_attempts(&self, filter: &AttemptFilter) -> Result<Vec<AttemptEntry>, StoreError> {
        let (state, _now) = self.lock();
        let limit = filter.limit.map_or(usize::MAX, |l| l as usize);
        Ok(state
            .attempts
            .iter()
            .filter(|a| filter.selects(a))
            .take(limit)
            .cloned()
            .collect())
    }
}

#[async_trait]
impl OwnershipBackend for MemoryStore {
    async fn join(&self, group: &str, members: Vec<String>) -> Result<Membership, StoreError> {
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

    async fn read_membership(&self, group: &str) -> Result<Option<Membership>, StoreError> {
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

    async fn acquire_job(
        &self,
        job: &str,
        holder: &str,
        lease: Duration,
    ) -> Result<JobLeaseAcquire, StoreError> {
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

    async fn heartbeat_job(
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

    async fn release_job(&self, job: &str, fence: u64) -> Result<(), StoreError> {
        let (mut state, _now) = self.lock();
        machine::job_held(state.job_leases.get(job).cloned(), job, fence)?;
        state.job_leases.remove(job);
        Ok(())
    }
}

#[async_trait]
impl RegistryBackend for MemoryStore {
    async fn read_registrations(
        &self,
        namespace: Option<&str>,
    ) -> Result<Vec<Registration>, StoreError> {
        let (state, _now) = self.lock();
        Ok(state
            .registrations
            .values()
            .filter(|r| namespace.is_none_or(|n| r.namespace == n))
            .cloned()
            .collect())
    }

    async fn update_registration(
        &self,
        namespace: &str,
        component: Option<(String, Vec<u8>)>,
        change: Change,
    ) -> Result<Registration, StoreError> {
        let (mut state, now) = self.lock();
        let next = change(state.registrations.get(namespace).cloned(), now)?;
        if let Some((digest, bytes)) = component {
            state.components.entry(digest).or_insert(bytes);
        }
        state
            .registrations
            .insert(namespace.to_string(), next.clone());
        Ok(next)
    }

    async fn read_component(&self, digest: &str) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.lock().0.components.get(digest).cloned())
    }

    async fn read_setting(&self, name: &str) -> Result<Option<String>, StoreError> {
        Ok(self.lock().0.settings.get(name).cloned())
    }

    async fn write_setting(&self, name: &str, value: &str) -> Result<(), StoreError> {
        self.lock()
            .0
            .settings
            .insert(name.to_string(), value.to_string());
        Ok(())
    }
}

/// Nothing in memory is atomic with a write elsewhere: an effect in the
/// store's transaction is refused rather than run without the guarantee.
#[async_trait]
impl crate::port::Transactions for MemoryStore {
    async fn database(&self) -> Result<crate::port::Database, StoreError> {
        Err(StoreError::NotTransactional {
            store: RecordBackend::name(self).to_string(),
            why: "the in-memory store has no database a business write could share \
                  (use a SQLite or PostgreSQL store, with the business tables beside idem's)"
                .into(),
        })
    }
}

/// The gate's entries under their own lock, the clock read under it.
#[async_trait]
impl GateBackend for MemoryStore {
    async fn gate_transact<T: Send + 'static>(
        &self,
        gate: &str,
        key: &str,
        decide: GateDecide<T>,
    ) -> Result<T, StoreError> {
        // As for the records: an entry is replaced whole, so a poisoned lock
        // holds nothing half written.
        let mut gates = self.gates.lock().unwrap_or_else(|p| p.into_inner());
        let now = self.options.clock.now_ms();
        let id = (gate.to_string(), key.to_string());
        let step = decide(gates.get(&id).cloned(), now)?;
        if let Some(saved) = step.save {
            gates.insert(id, saved);
        }
        Ok(step.answer)
    }

    async fn gate_read(&self, gate: &str, key: &str) -> Result<Option<GateEntry>, StoreError> {
        let gates = self.gates.lock().unwrap_or_else(|p| p.into_inner());
        Ok(gates.get(&(gate.to_string(), key.to_string())).cloned())
    }

    async fn gate_forget(&self, gate: &str, before_ms: u64) -> Result<u64, StoreError> {
        let mut gates = self.gates.lock().unwrap_or_else(|p| p.into_inner());
        let before = gates.len();
        gates.retain(|(g, _), e| {
            g != gate || e.state == GateState::InFlight || e.updated_ms >= before_ms
        });
        Ok((before - gates.len()) as u64)
    }
}
