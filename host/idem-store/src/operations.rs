//! Every [`Store`] operation, written once over the backend port
//! ([`RecordBackend`]): validate, pick the decision (`machine.rs`), run it
//! in the backend's record transaction or on its fast path, and check a
//! fast path's write against the machine's answer (debug builds).
//!
//! The claim sequence (validate → epoch → load → decide → fence → save) is
//! here and nowhere else; backends only lock, load and save.

use std::collections::HashMap;
use std::time::Duration;

use async_trait::async_trait;

use crate::attempt::{AttemptEntry, AttemptEvent, AttemptFilter, ResolveRequest};
use crate::backend::{BatchClaim, Call, Decide, RecordBackend, Step, Written};
use crate::clock::StoreClock;
use crate::error::StoreError;
use crate::holder::Holder;
use crate::machine::{self, ClaimStep};
use crate::record::{
    Claim, ClaimOutcome, ClaimRequest, Finish, JobLeaseAcquire, ListFilter, Membership, Outcome,
    OwnershipToken, Record, RecordKey, RecordState, RecordView, Write, WriteOutcome,
};
use crate::registry::{self, Activation, Registration, Rollback};
use crate::store::{self, Store};

/// The store-wide setting behind [`Store::requires_registration`].
const REQUIRE_REGISTRATION: &str = "require-registration";

#[async_trait]
impl<B: RecordBackend> Store for B {
    fn describe(&self) -> String {
        self.name().to_string()
    }

    fn clock(&self) -> &StoreClock {
        &self.options().clock
    }

    fn batches_share_commits(&self) -> bool {
        RecordBackend::batches_share_commits(self)
    }

    fn concurrent_commits(&self) -> usize {
        RecordBackend::concurrent_commits(self)
    }

    /// One shared transaction carries claims and finishes alike: one
    /// commit for both.
    fn mixes_writes(&self) -> bool {
        RecordBackend::batches_share_commits(self) && self.batches_share_a_transaction()
    }

    async fn claim(&self, request: ClaimRequest) -> Result<ClaimOutcome, StoreError> {
        machine::validate(&request)?;
        let request = machine::kept(request, self.options());
        if let Some(written) = self.fast_claim(&request).await? {
            return Ok(ClaimOutcome::Claimed(fresh_claim(&request, &written)));
        }
        self.transact(claim_call(&request), claim_decision(request))
            .await
    }

    async fn claim_many(
        &self,
        requests: Vec<ClaimRequest>,
    ) -> Result<Vec<Result<ClaimOutcome, StoreError>>, StoreError> {
        let options = self.options();
        let requests = requests
            .into_iter()
            .map(|r| machine::kept(r, options))
            .collect();
        claim_many(self, requests).await
    }

    async fn take_over_with(
        &self,
        key: &RecordKey,
        observed_fence: u64,
        lease: Duration,
        holder: Holder,
        ownership: Option<&OwnershipToken>,
    ) -> Result<Claim, StoreError> {
        let call = Call {
            context: "taking over",
            key: key.clone(),
            draws_fence: true,
            ownership: ownership.cloned(),
        };
        let key = key.clone();
        self.transact(
            call,
            Box::new(move |current, now, fences| {
                // Sent again after its answer was lost: already taken over.
                if let Some(claim) = machine::held_by_attempt(current.as_ref(), &holder, now) {
                    return Ok(Step::done(claim));
                }
                let record = machine::take_over_check(current, &key, observed_fence, now)?;
                let fence = fences.next_fence()?;
                let record = machine::taken_over(record, fence, lease, holder.clone(), now);
                let claim = machine::claim_of(&record);
                let entry = AttemptEntry::of_record(&record, AttemptEvent::TakenOver, now);
                Ok(Step::put(record, claim).logging(entry))
            }),
        )
        .await
    }

    async fn mark_unknown(&self, key: &RecordKey, observed_fence: u64) -> Result<(), StoreError> {
        let call = plain_call("marking outcome-unknown", key);
        let key = key.clone();
        self.transact(
            call,
            Box::new(move |current, now, _| {
                Ok(
                    match machine::mark_unknown(current, &key, observed_fence, now)? {
                        Some(record) => {
                            let entry =
                                AttemptEntry::of_record(&record, AttemptEvent::MarkedUnknown, now);
                            Step::put(record, ()).logging(entry)
                        }
                        None => Step::done(()),
                    },
                )
            }),
        )
        .await
    }

    async fn complete(
        &self,
        key: &RecordKey,
        fence: u64,
        outcome: Outcome,
    ) -> Result<(), StoreError> {
        finish(self, key, fence, RecordState::Completed, outcome).await
    }

    async fn fail(
        &self,
        key: &RecordKey,
        fence: u64,
        retryable: bool,
        outcome: Outcome,
    ) -> Result<(), StoreError> {
        finish(self, key, fence, machine::failed_state(retryable), outcome).await
    }

    async fn finish_many(
        &self,
        finishes: Vec<Finish>,
    ) -> Result<Vec<Result<(), StoreError>>, StoreError> {
        finish_many(self, finishes).await
    }

    async fn write_many(
        &self,
        writes: Vec<Write>,
    ) -> Result<Vec<Result<WriteOutcome, StoreError>>, StoreError> {
        if Store::mixes_writes(self) {
            write_in_one_transaction(self, writes).await
        } else {
            store::write_by_kind(self, writes).await
        }
    }

    async fn heartbeat(
        &self,
        key: &RecordKey,
        fence: u64,
        lease: Duration,
    ) -> Result<u64, StoreError> {
        let call = plain_call("heartbeating", key);
        let key = key.clone();
        self.transact(
            call,
            Box::new(move |current, now, _| {
                match machine::heartbeat(current, &key, fence, lease, now) {
                    Ok(record) => {
                        let until = record.lease_until_ms;
                        Ok(Step::put(record, until))
                    }
                    Err(refused) => logged_if_fenced(refused, "heartbeating", now),
                }
            }),
        )
        .await
    }

    async fn get(&self, key: &RecordKey) -> Result<Option<RecordView>, StoreError> {
        let (record, now) = self.read(key).await?;
        Ok(machine::live(record, now).map(|r| RecordView::at(r, now)))
    }

    async fn list(&self, filter: ListFilter) -> Result<Vec<RecordView>, StoreError> {
        let (records, now) = self.read_many(&filter).await?;
        Ok(records
            .into_iter()
            .map(|r| RecordView::at(r, now))
            .collect())
    }

    async fn gc(&self) -> Result<u64, StoreError> {
        let mut removed = 0;
        loop {
            let limit = self.gc_batch();
            let batch = self.collect_garbage(limit).await?;
            removed += batch;
            if batch < u64::from(limit) {
                return Ok(removed);
            }
        }
    }

    async fn log_answers(&self, entries: Vec<AttemptEntry>) -> Result<(), StoreError> {
        if let Some(entry) = entries.iter().find(|e| !e.event.is_answer()) {
            return Err(StoreError::InvalidRequest(format!(
                "`{}` is written by the record change it describes, not appended as an answer",
                entry.event
            )));
        }
        if entries.is_empty() {
            return Ok(());
        }
        self.append(entries).await
    }

    async fn attempts(&self, filter: AttemptFilter) -> Result<Vec<AttemptEntry>, StoreError> {
        // A key outside the filter's namespace selects nothing (as
        // `AttemptFilter::selects` says); a backend reads a key's timeline
        // by its key alone.
        if let (Some(key), Some(namespace)) = (&filter.key, &filter.namespace)
            && &key.namespace != namespace
        {
            return Ok(Vec::new());
        }
        self.read_attempts(&filter).await
    }

    async fn resolve(&self, request: ResolveRequest) -> Result<RecordView, StoreError> {
        machine::check_resolution(&request, self.options().max_outcome_bytes)?;
        let call = Call {
            context: "resolving a record",
            key: request.key.clone(),
            draws_fence: true,
            ownership: None,
        };
        self.transact(
            call,
            Box::new(move |current, now, fences| {
                let record =
                    machine::resolve_check(current, &request.key, request.observed_fence, now)?;
                let fence = fences.next_fence()?;
                let record = machine::resolved(record, fence, &request, now);
                let mut entry = AttemptEntry::of_record(&record, request.resolution.event(), now);
                entry.actor = Some(crate::attempt::bounded_note(request.by.clone()));
                entry.detail = Some(crate::attempt::bounded_note(request.reason.clone()));
                let view = RecordView::at(record.clone(), now);
                Ok(Step::put(record, view).logging(entry))
            }),
        )
        .await
    }

    async fn registration(&self, namespace: &str) -> Result<Option<Registration>, StoreError> {
        Ok(self.read_registrations(Some(namespace)).await?.pop())
    }

    async fn registrations(&self) -> Result<Vec<Registration>, StoreError> {
        self.read_registrations(None).await
    }

    async fn activate_policy(&self, request: Activation) -> Result<Registration, StoreError> {
        let change = registry::activate(&request)?;
        let component = Some((request.digest.clone(), request.component));
        self.update_registration(&request.namespace, component, change)
            .await
    }

    async fn rollback_policy(&self, request: Rollback) -> Result<Registration, StoreError> {
        let change = registry::rollback(&request)?;
        self.update_registration(&request.namespace, None, change)
            .await
    }

    async fn policy_component(&self, digest: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.read_component(digest).await
    }

    async fn requires_registration(&self) -> Result<bool, StoreError> {
        Ok(self.read_setting(REQUIRE_REGISTRATION).await?.as_deref() == Some("on"))
    }

    async fn set_require_registration(&self, on: bool) -> Result<(), StoreError> {
        self.write_setting(REQUIRE_REGISTRATION, if on { "on" } else { "off" })
            .await
    }

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

/// A call that draws no fence and carries no ownership token.
fn plain_call(context: &'static str, key: &RecordKey) -> Call {
    Call {
        context,
        key: key.clone(),
        draws_fence: false,
        ownership: None,
    }
}

fn claim_call(request: &ClaimRequest) -> Call {
    Call {
        context: "claiming",
        key: request.key.clone(),
        draws_fence: true,
        ownership: request.ownership.clone(),
    }
}

/// A claim, decided by the machine: the existing record, or a new one
/// under a new fence.
fn claim_decision(request: ClaimRequest) -> Decide<ClaimOutcome> {
    Box::new(move |current, now, fences| {
        Ok(match machine::claim(current, &request, now) {
            ClaimStep::Existing(existing) => Step::done(ClaimOutcome::Existing(existing)),
            ClaimStep::Held(record) => {
                Step::done(ClaimOutcome::Claimed(machine::claim_of(&record)))
            }
            ClaimStep::Insert => {
                let record = machine::new_record(&request, fences.next_fence()?, now);
                let claim = machine::claim_of(&record);
                let entry = executed_entry(&record, &request, now);
                Step::put(record, ClaimOutcome::Claimed(claim)).logging(entry)
            }
        })
    })
}

/// The `executed` entry of a fresh claim.
pub(crate) fn executed_entry(record: &Record, request: &ClaimRequest, now: u64) -> AttemptEntry {
    let mut entry = AttemptEntry::of_record(record, AttemptEvent::Executed, now);
    entry.operation_digest = request.operation_digest;
    entry
}

/// A refused holder write: a fenced one (the holder was deposed by a
/// take-over or a resolution, or its record was sent to review) is refused
/// *and* logged, so the log shows that a paused holder came back too late;
/// any other refusal writes nothing. A fence above the record's was never
/// handed out: that is a wrong request, not a deposed holder, and logging
/// it would let any caller grow the log without end.
fn logged_if_fenced<T>(refused: StoreError, doing: &str, now: u64) -> Result<Step<T>, StoreError> {
    let (key, fence, why) = match &refused {
        StoreError::Fenced {
            key,
            fence,
            current,
        } if fence < current => (key, fence, format!("the record is at fence {current}")),
        // Sent to review while its holder was away: the holder is deposed
        // just the same.
        StoreError::NotInProgress {
            key,
            fence,
            state: RecordState::OutcomeUnknown,
        } => (
            key,
            fence,
            "the record was sent to review (outcome-unknown)".into(),
        ),
        _ => return Err(refused),
    };
    let entry = AttemptEntry {
        id: 0,
        key: key.clone(),
        fence: *fence,
        event: AttemptEvent::Fenced,
        holder: None,
        at_ms: now,
        policy_digest: None,
        operation_digest: None,
        actor: None,
        detail: Some(format!("{doing} refused: {why}")),
    };
    Ok(Step::refuse(refused).logging(entry))
}

/// The claim a fast path made, as the machine makes it; in debug builds
/// the row the backend wrote must be exactly the machine's record.
fn fresh_claim(request: &ClaimRequest, written: &Written) -> Claim {
    let record = machine::new_record(request, written.fence, written.now_ms);
    check_written("a fast claim", &record, written);
    machine::claim_of(&record)
}

/// In debug builds: a fast path's row must equal the machine's record.
fn check_written(path: &str, expected: &Record, written: &Written) {
    if let Some(row) = &written.row {
        debug_assert_eq!(row, expected, "{path} disagrees with the state machine");
    }
}

/// A finish's fast write, checked against the machine: the row as it was
/// before (in progress under this fence, no outcome) finished by
/// `machine::finish` at the statement's clock must be the row written.
fn check_finished(
    key: &RecordKey,
    fence: u64,
    state: RecordState,
    outcome: &Outcome,
    limit: usize,
    written: &Written,
) {
    let Some(row) = &written.row else { return };
    let mut before = row.clone();
    before.state = RecordState::InProgress;
    before.outcome = None;
    // Overwritten by the finish; only keeps `before` live at `now`.
    before.retain_until_ms = u64::MAX;
    let expected = machine::finish(
        Some(before),
        key,
        fence,
        state,
        outcome.clone(),
        limit,
        written.now_ms,
    );
    match expected {
        Ok(expected) => check_written("a fast finish", &expected, written),
        Err(e) => debug_assert!(false, "a fast finish wrote what the machine refuses: {e}"),
    }
}

/// The finish decision: `machine::finish` of the record as read.
fn finish_decision(
    key: RecordKey,
    fence: u64,
    state: RecordState,
    outcome: Outcome,
    limit: usize,
) -> Decide<()> {
    Box::new(move |current, now, _| {
        match machine::finish(current, &key, fence, state, outcome.clone(), limit, now) {
            Ok(record) => {
                let entry = AttemptEntry::of_record(&record, ended(state), now);
                Ok(Step::put(record, ()).logging(entry))
            }
            Err(refused) => logged_if_fenced(refused, "finishing", now),
        }
    })
}

/// The log event of a holder's end.
pub(crate) fn ended(state: RecordState) -> AttemptEvent {
    match state {
        RecordState::Completed => AttemptEvent::Completed,
        RecordState::FailedRetryable => AttemptEvent::FailedRetryable,
        _ => AttemptEvent::FailedPermanent,
    }
}

/// A holder's completion or failure: the fast path when the backend has
/// one, else (and whenever the fast path wrote nothing or failed) the
/// record transaction, which says exactly why it refuses.
async fn finish<B: RecordBackend>(
    backend: &B,
    key: &RecordKey,
    fence: u64,
    state: RecordState,
    outcome: Outcome,
) -> Result<(), StoreError> {
    let limit = backend.options().max_outcome_bytes;
    let checked = machine::checked_outcome(key, outcome, limit)?;
    if let Ok(Some(written)) = backend.fast_finish(key, fence, state, &checked).await {
        check_finished(key, fence, state, &checked, limit, &written);
        return Ok(());
    }
    let call = plain_call("finishing an attempt", key);
    backend
        .transact(
            call,
            finish_decision(key.clone(), fence, state, checked, limit),
        )
        .await
}

/// Where one request of a batch stands.
enum Slot<T> {
    /// Answered.
    Done(Result<T, StoreError>),
    /// The same key as the request at this position, which came first.
    SameAs(usize),
    /// For the single path, after the batch.
    Single,
}

/// `Store::claim_many`: the backend's batch statement when it has one,
/// else one shared transaction when that is its cheap way, else one claim
/// at a time.
async fn claim_many<B: RecordBackend>(
    backend: &B,
    mut requests: Vec<ClaimRequest>,
) -> Result<Vec<Result<ClaimOutcome, StoreError>>, StoreError> {
    machine::one_claim_per_attempt(&mut requests);
    let token = requests.first().and_then(|r| r.ownership.clone());
    let one_token = requests.iter().all(|r| r.ownership == token);
    if requests.len() >= 2
        && one_token
        && let Some(outcomes) = claim_batched(backend, &requests).await?
    {
        return Ok(outcomes);
    }
    if backend.batches_share_a_transaction() {
        return claim_in_one_transaction(backend, requests).await;
    }
    let mut outcomes = Vec::with_capacity(requests.len());
    for request in requests {
        outcomes.push(backend.claim(request).await);
    }
    Ok(outcomes)
}

/// Every valid request in one [`RecordBackend::transact_many`]; an invalid
/// one is refused alone.
async fn claim_in_one_transaction<B: RecordBackend>(
    backend: &B,
    requests: Vec<ClaimRequest>,
) -> Result<Vec<Result<ClaimOutcome, StoreError>>, StoreError> {
    let prepared = requests
        .into_iter()
        .map(|request| match machine::validate(&request) {
            Err(refused) => Prepared::Answered(Err(refused)),
            Ok(()) => Prepared::Call(claim_call(&request), claim_decision(request)),
        })
        .collect();
    in_one_transaction(backend, prepared).await
}

/// One item of a batch sent through [`in_one_transaction`]: answered
/// already (refused before the store, or written by a batch statement), or
/// a record transaction to run.
enum Prepared<T> {
    Answered(Result<T, StoreError>),
    Call(Call, Decide<T>),
}

/// Runs every call of `prepared` in one [`RecordBackend::transact_many`]
/// (one commit where the backend shares one) and answers each item in
/// order, the answered ones as they are.
async fn in_one_transaction<B: RecordBackend, T: Send + 'static>(
    backend: &B,
    prepared: Vec<Prepared<T>>,
) -> Result<Vec<Result<T, StoreError>>, StoreError> {
    let mut slots = Vec::with_capacity(prepared.len());
    let mut calls = Vec::new();
    for item in prepared {
        match item {
            Prepared::Answered(answer) => slots.push(Some(answer)),
            Prepared::Call(call, decide) => {
                slots.push(None);
                calls.push((call, decide));
            }
        }
    }
    let mut answers = backend.transact_many(calls).await?.into_iter();
    slots
        .into_iter()
        .map(|slot| {
            slot.or_else(|| answers.next()).ok_or_else(|| {
                StoreError::Task("a batch transaction answered fewer calls than it ran".into())
            })
        })
        .collect()
}

/// `decide` with its answer mapped by `f`, for a batch of mixed calls.
fn mapped<T: 'static, U: 'static>(mut decide: Decide<T>, f: fn(T) -> U) -> Decide<U> {
    Box::new(move |current, now, fences| decide(current, now, fences).map(|step| step.map(f)))
}

/// Claims and finishes in one [`RecordBackend::transact_many`] (one
/// commit), each decided as alone, in order; an invalid claim or an
/// outcome too large is refused alone.
async fn write_in_one_transaction<B: RecordBackend>(
    backend: &B,
    writes: Vec<Write>,
) -> Result<Vec<Result<WriteOutcome, StoreError>>, StoreError> {
    let options = backend.options();
    let limit = options.max_outcome_bytes;
    let prepared = writes
        .into_iter()
        .map(|write| match write {
            Write::Claim(request) => {
                let request = machine::kept(request, options);
                match machine::validate(&request) {
                    Err(refused) => Prepared::Answered(Err(refused)),
                    Ok(()) => Prepared::Call(
                        claim_call(&request),
                        mapped(claim_decision(request), WriteOutcome::Claim),
                    ),
                }
            }
            Write::Finish(f) => {
                let state = f.ending.state();
                match machine::checked_outcome(&f.key, f.outcome, limit) {
                    Err(refused) => Prepared::Answered(Err(refused)),
                    Ok(outcome) => Prepared::Call(
                        plain_call("finishing an attempt", &f.key),
                        mapped(
                            finish_decision(f.key, f.fence, state, outcome, limit),
                            |()| WriteOutcome::Finished,
                        ),
                    ),
                }
            }
        })
        .collect();
    in_one_transaction(backend, prepared).await
}

/// The backend's batch statement (`None` when it has none): each valid key
/// is sent once, at its first position; the machine decides every record
/// the statement found; a repeated key finds what its first occurrence
/// made or found; what the statement could not settle takes the single
/// path afterwards, in order.
async fn claim_batched<B: RecordBackend>(
    backend: &B,
    requests: &[ClaimRequest],
) -> Result<Option<Vec<Result<ClaimOutcome, StoreError>>>, StoreError> {
    let mut slots = Vec::with_capacity(requests.len());
    let mut first_of: HashMap<&RecordKey, usize> = HashMap::new();
    let mut sent = Vec::new();
    for (i, request) in requests.iter().enumerate() {
        slots.push(match machine::validate(request) {
            Err(refused) => Slot::Done(Err(refused)),
            Ok(()) => match first_of.get(&request.key) {
                Some(&first) => Slot::SameAs(first),
                None => {
                    first_of.insert(&request.key, i);
                    sent.push(i);
                    Slot::Single
                }
            },
        });
    }
    let answers = if sent.is_empty() {
        Vec::new()
    } else {
        let batch: Vec<&ClaimRequest> = sent.iter().map(|&i| &requests[i]).collect();
        match backend.batch_claim(&batch).await? {
            Some(answers) => answers,
            None => return Ok(None),
        }
    };
    if answers.len() != sent.len() {
        return Err(StoreError::Corrupt {
            store: backend.name().to_string(),
            what: format!(
                "a batch of {} claims got {} answers",
                sent.len(),
                answers.len()
            ),
        });
    }
    // The record each sent request made or found, for its repeats.
    let mut seen: HashMap<usize, (Record, u64)> = HashMap::new();
    for (&i, answer) in sent.iter().zip(answers) {
        let request = &requests[i];
        slots[i] = match answer {
            BatchClaim::Refused(refused) => Slot::Done(Err(refused)),
            BatchClaim::Single => Slot::Single,
            BatchClaim::Inserted(written) => {
                let record = machine::new_record(request, written.fence, written.now_ms);
                check_written("a batch claim", &record, &written);
                let claim = machine::claim_of(&record);
                seen.insert(i, (record, written.now_ms));
                Slot::Done(Ok(ClaimOutcome::Claimed(claim)))
            }
            BatchClaim::Found(record, now) => match machine::claim(Some(record), request, now) {
                ClaimStep::Existing(existing) => {
                    seen.insert(i, (existing.view.record.clone(), now));
                    Slot::Done(Ok(ClaimOutcome::Existing(existing)))
                }
                ClaimStep::Held(record) => {
                    let claim = machine::claim_of(&record);
                    seen.insert(i, (*record, now));
                    Slot::Done(Ok(ClaimOutcome::Claimed(claim)))
                }
                // Past its retention: replaced under a lock on the single
                // path.
                ClaimStep::Insert => Slot::Single,
            },
        };
    }
    let mut outcomes = Vec::with_capacity(requests.len());
    for (slot, request) in slots.into_iter().zip(requests) {
        let outcome = match slot {
            Slot::Done(outcome) => outcome,
            Slot::SameAs(first) => match seen.get(&first) {
                // A record this batch just made or found live is live at
                // the same instant, so the machine answers Existing; the
                // single path is the safe answer otherwise.
                Some((record, now)) => match machine::claim(Some(record.clone()), request, *now) {
                    ClaimStep::Existing(existing) => Ok(ClaimOutcome::Existing(existing)),
                    // A repeat carries no token (`claim_many`): never held.
                    ClaimStep::Insert | ClaimStep::Held(_) => backend.claim(request.clone()).await,
                },
                // The first occurrence was refused or took the single
                // path: so does this one, after it.
                None => backend.claim(request.clone()).await,
            },
            Slot::Single => backend.claim(request.clone()).await,
        };
        outcomes.push(outcome);
    }
    Ok(Some(outcomes))
}

/// `Store::finish_many`: outcomes checked first (too large: refused
/// alone), then the backend's batch statement, or one shared transaction,
/// or one finish at a time.
async fn finish_many<B: RecordBackend>(
    backend: &B,
    finishes: Vec<Finish>,
) -> Result<Vec<Result<(), StoreError>>, StoreError> {
    let limit = backend.options().max_outcome_bytes;
    // Outcomes checked in place (moved, never copied: a body may be large);
    // a refused one is that finish's answer alone.
    let mut refused: Vec<Option<StoreError>> = Vec::with_capacity(finishes.len());
    let mut checked = Vec::with_capacity(finishes.len());
    for f in finishes {
        let Finish {
            key,
            fence,
            ending,
            outcome,
        } = f;
        let outcome = match machine::checked_outcome(&key, outcome, limit) {
            Ok(outcome) => {
                refused.push(None);
                outcome
            }
            Err(refusal) => {
                refused.push(Some(refusal));
                Outcome::default()
            }
        };
        checked.push(Finish {
            key,
            fence,
            ending,
            outcome,
        });
    }
    // The first occurrence of each key goes into the batch statement.
    let mut slots: Vec<Slot<()>> = Vec::with_capacity(checked.len());
    let mut first_of: HashMap<&RecordKey, usize> = HashMap::new();
    let mut sent = Vec::new();
    for (i, (f, refusal)) in checked.iter().zip(refused).enumerate() {
        slots.push(match refusal {
            Some(refusal) => Slot::Done(Err(refusal)),
            None => match first_of.get(&f.key) {
                Some(&first) => Slot::SameAs(first),
                None => {
                    first_of.insert(&f.key, i);
                    sent.push(i);
                    Slot::Single
                }
            },
        });
    }
    let batch: Vec<&Finish> = sent.iter().map(|&i| &checked[i]).collect();
    let answers = if batch.len() >= 2 {
        backend.batch_finish(&batch).await?
    } else {
        None
    };
    let Some(answers) = answers else {
        return finish_without_batch(backend, slots, checked).await;
    };
    for (&i, answer) in sent.iter().zip(answers) {
        if let Some(written) = answer {
            let f = &checked[i];
            check_finished(
                &f.key,
                f.fence,
                f.ending.state(),
                &f.outcome,
                limit,
                &written,
            );
            slots[i] = Slot::Done(Ok(()));
        }
    }
    // Everything the statement did not write, and repeated keys after
    // their first occurrence: the single path decides, in order.
    let mut results = Vec::with_capacity(slots.len());
    for (slot, f) in slots.into_iter().zip(checked) {
        results.push(match slot {
            Slot::Done(result) => result,
            Slot::SameAs(_) | Slot::Single => {
                finish(backend, &f.key, f.fence, f.ending.state(), f.outcome).await
            }
        });
    }
    Ok(results)
}

/// `finish_many` without a batch statement: one shared transaction where
/// the backend prefers it, else one finish at a time.
async fn finish_without_batch<B: RecordBackend>(
    backend: &B,
    slots: Vec<Slot<()>>,
    checked: Vec<Finish>,
) -> Result<Vec<Result<(), StoreError>>, StoreError> {
    let limit = backend.options().max_outcome_bytes;
    if !backend.batches_share_a_transaction() {
        let mut results = Vec::with_capacity(slots.len());
        for (slot, f) in slots.into_iter().zip(checked) {
            results.push(match slot {
                Slot::Done(result) => result,
                _ => finish(backend, &f.key, f.fence, f.ending.state(), f.outcome).await,
            });
        }
        return Ok(results);
    }
    let prepared = slots
        .into_iter()
        .zip(checked)
        .map(|(slot, f)| match slot {
            Slot::Done(result) => Prepared::Answered(result),
            _ => {
                let state = f.ending.state();
                Prepared::Call(
                    plain_call("finishing a batch", &f.key),
                    finish_decision(f.key, f.fence, state, f.outcome, limit),
                )
            }
        })
        .collect();
    in_one_transaction(backend, prepared).await
}
