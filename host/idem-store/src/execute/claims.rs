//! Claims: one alone (fast path, else the record transaction), and many
//! (the backend's batch statement, else one shared transaction, else one
//! at a time).

use std::collections::HashMap;

use super::checked::fresh_claim;
use super::{Prepared, Slot, first_occurrences, in_one_transaction, one_at_a_time};
use crate::backend::{BatchAnswer, Call, Decide, RecordBackend, Step};
use crate::machine::{self, ClaimDecision};
use crate::vocabulary::StoreError;
use crate::vocabulary::{AttemptEntry, AttemptEvent};
use crate::vocabulary::{ClaimOutcome, ClaimRequest, Record};

/// One claim (the request valid and kept as the store keeps operations):
/// the backend's fast path when it has one and no record exists, else the
/// record transaction.
pub(super) async fn claim<B: RecordBackend>(
    backend: &B,
    request: ClaimRequest,
) -> Result<ClaimOutcome, StoreError> {
    if let Some(written) = backend.fast_claim(&request).await? {
        return Ok(ClaimOutcome::Claimed(
            fresh_claim("a fast claim", &request, &written).1,
        ));
    }
    claim_transaction(backend, request).await
}

/// A claim decided in the record transaction: the existing record, or a
/// new one under a new fence.
pub(super) async fn claim_transaction<B: RecordBackend>(
    backend: &B,
    request: ClaimRequest,
) -> Result<ClaimOutcome, StoreError> {
    backend
        .transact(claim_call(&request), claim_decision(request))
        .await
}

pub(super) fn claim_call(request: &ClaimRequest) -> Call {
    Call {
        context: "claiming",
        key: request.key.clone(),
        draws_fence: true,
        ownership: request.ownership.clone(),
    }
}

/// A claim, decided by the machine: the existing record, or a new one
/// under a new fence.
pub(super) fn claim_decision(request: ClaimRequest) -> Decide<ClaimOutcome> {
    Box::new(move |current, now, fences| {
        Ok(match machine::claim(current, &request, now) {
            ClaimDecision::Existing(existing) => Step::done(ClaimOutcome::Existing(existing)),
            ClaimDecision::Held(record) => {
                Step::done(ClaimOutcome::Claimed(machine::claim_of(&record)))
            }
            ClaimDecision::Insert => {
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

/// A claim of a batch, prepared for one shared transaction: refused now
/// when invalid.
pub(super) fn prepared_claim<T>(request: ClaimRequest, answer: fn(ClaimOutcome) -> T) -> Prepared<T>
where
    T: Send + 'static,
{
    match machine::validate(&request) {
        Err(refused) => Prepared::Answered(Err(refused)),
        Ok(()) => Prepared::Call(
            claim_call(&request),
            super::mapped(claim_decision(request), answer),
        ),
    }
}

/// `Writes::claim_many` (requests kept as the store keeps operations): the
/// backend's batch statement when it has one, else one shared transaction
/// when that is its cheap way, else one claim at a time.
pub(super) async fn claim_many<B: RecordBackend>(
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
    if backend.batching().one_transaction {
        let prepared = requests
            .into_iter()
            .map(|request| prepared_claim(request, |outcome| outcome))
            .collect();
        return in_one_transaction(backend, prepared).await;
    }
    let slots = requests.iter().map(|_| Slot::Single).collect();
    Ok(one_at_a_time(slots, requests, |request| single(backend, request)).await)
}

/// One claim of a batch on the single path (kept already): validated, then
/// claimed as alone, inside the batch's own call (so timed once, as it).
async fn single<B: RecordBackend>(
    backend: &B,
    request: ClaimRequest,
) -> Result<ClaimOutcome, StoreError> {
    machine::validate(&request)?;
    claim(backend, request).await
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
    let (mut slots, sent) = first_occurrences(
        requests
            .iter()
            .map(|request| (&request.key, machine::validate(request).err())),
    );
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
            BatchAnswer::Refused(refused) => Slot::Done(Err(refused)),
            BatchAnswer::Single => Slot::Single,
            BatchAnswer::Inserted(written) => {
                let (record, claim) = fresh_claim("a batch claim", request, &written);
                seen.insert(i, (record, written.now_ms));
                Slot::Done(Ok(ClaimOutcome::Claimed(claim)))
            }
            BatchAnswer::Found(record, now) => match machine::claim(Some(record), request, now) {
                ClaimDecision::Existing(existing) => {
                    seen.insert(i, (existing.view.record.clone(), now));
                    Slot::Done(Ok(ClaimOutcome::Existing(existing)))
                }
                ClaimDecision::Held(record) => {
                    let claim = machine::claim_of(&record);
                    seen.insert(i, (*record, now));
                    Slot::Done(Ok(ClaimOutcome::Claimed(claim)))
                }
                // Past its retention: replaced under a lock on the single
                // path.
                ClaimDecision::Insert => Slot::Single,
            },
        };
    }
    // A repeat whose first occurrence made or found a record live at that
    // instant finds it (the machine answers Existing); any other repeat,
    // and whatever the statement did not settle, takes the single path.
    for (i, request) in requests.iter().enumerate() {
        if let Slot::SameAs(first) = slots[i]
            && let Some((record, now)) = seen.get(&first)
            && let ClaimDecision::Existing(existing) =
                machine::claim(Some(record.clone()), request, *now)
        {
            slots[i] = Slot::Done(Ok(ClaimOutcome::Existing(existing)));
        }
    }
    let rest: Vec<&ClaimRequest> = requests.iter().collect();
    Ok(Some(
        one_at_a_time(slots, rest, |request: &ClaimRequest| {
            single(backend, request.clone())
        })
        .await,
    ))
}
