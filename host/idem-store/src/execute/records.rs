//! [`Records`] for every backend.

use std::time::Duration;

use async_trait::async_trait;

use super::{plain_call, timed};
use crate::backend::{Call, RecordBackend, Step};
use crate::machine;
use crate::port::Records;
use crate::vocabulary::MAX_NOTE_BYTES;
use crate::vocabulary::StoreError;
use crate::vocabulary::{
    AMENDS, AttemptEntry, AttemptEvent, AttemptFilter, ResolveRequest, bounded_note,
};
use crate::vocabulary::{Claim, ListFilter, OwnershipToken, RecordKey, RecordState, RecordView};
use crate::vocabulary::{EXPIRED_WITHOUT_EFFECT, Holder};

/// Room an amendment's note keeps for what it amends
/// (`amends resolved-rejected at fence N: `), beside the reason.
const AMENDS_NOTE_BYTES: usize = 64;

#[async_trait]
impl<B: RecordBackend> Records for B {
    async fn take_over_as(
        &self,
        key: &RecordKey,
        observed_fence: u64,
        lease: Duration,
        holder: Holder,
        ownership: Option<&OwnershipToken>,
        effect_atomic: bool,
    ) -> Result<Claim, StoreError> {
        let call = Call {
            context: "taking over",
            key: key.clone(),
            draws_fence: true,
            ownership: ownership.cloned(),
        };
        let key = key.clone();
        timed(
            "take_over",
            self.transact(
                call,
                Box::new(move |current, now, fences| {
                    // Sent again after its answer was lost: already taken over.
                    if let Some(claim) = machine::held_by_attempt(current.as_ref(), &holder, now) {
                        return Ok(Step::done(claim));
                    }
                    let record = machine::take_over_check(current, &key, observed_fence, now)?;
                    // Said now, before the record becomes the taker's: the
                    // deposed attempt's effect commits with its end, so it
                    // did nothing (forensics names the case from this).
                    let without_effect = record.expired_without_effect(now);
                    let fence = fences.next_fence()?;
                    let record = machine::taken_over(
                        record,
                        fence,
                        lease,
                        holder.clone(),
                        effect_atomic,
                        now,
                    );
                    let claim = machine::claim_of(&record);
                    let mut entry = AttemptEntry::of_record(&record, AttemptEvent::TakenOver, now);
                    if without_effect {
                        entry.detail = Some(EXPIRED_WITHOUT_EFFECT.to_string());
                    }
                    Ok(Step::put(record, claim).logging(entry))
                }),
            ),
        )
        .await
    }

    async fn mark_unknown(&self, key: &RecordKey, observed_fence: u64) -> Result<(), StoreError> {
        let call = plain_call("marking outcome-unknown", key);
        let key = key.clone();
        timed(
            "mark_unknown",
            self.transact(
                call,
                Box::new(move |current, now, _| {
                    Ok(
                        match machine::mark_unknown(current, &key, observed_fence, now)? {
                            Some(record) => {
                                let entry = AttemptEntry::of_record(
                                    &record,
                                    AttemptEvent::MarkedUnknown,
                                    now,
                                );
                                Step::put(record, ()).logging(entry)
                            }
                            None => Step::done(()),
                        },
                    )
                }),
            ),
        )
        .await
    }

    async fn heartbeat(
        &self,
        key: &RecordKey,
        fence: u64,
        lease: Duration,
    ) -> Result<u64, StoreError> {
        let call = plain_call("heartbeating", key);
        let key = key.clone();
        timed(
            "heartbeat",
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
            ),
        )
        .await
    }

    async fn resolve(&self, request: ResolveRequest) -> Result<RecordView, StoreError> {
        machine::check_resolution(&request, self.options().max_outcome_bytes)?;
        self.transact(
            settle_call("resolving a record", &request),
            Box::new(move |current, now, fences| {
                let record =
                    machine::resolve_check(current, &request.key, request.observed_fence, now)?;
                let note = request.reason.clone();
                settled(record, fences.next_fence()?, &request, note, now)
            }),
        )
        .await
    }

    async fn amend(&self, request: ResolveRequest) -> Result<RecordView, StoreError> {
        machine::check_resolution(&request, self.options().max_outcome_bytes)?;
        if request.reason.len() + AMENDS_NOTE_BYTES > MAX_NOTE_BYTES {
            return Err(StoreError::InvalidRequest(format!(
                "an amendment's reason is {} bytes; at most {} are kept beside what it amends: say it shorter",
                request.reason.len(),
                MAX_NOTE_BYTES - AMENDS_NOTE_BYTES
            )));
        }
        // Only the attempt log tells a person's resolution from a holder's
        // end of the same state: without it, refuse for what is missing.
        let not_a_person = if self.options().attempt_log {
            "a holder's end wrote it, not a person: only a person's release or rejection can be amended"
        } else {
            "this store keeps no attempt log, so a person's resolution cannot be told from a holder's end"
        };
        // Who wrote the fence: the entry that issued it (a claim, a
        // take-over or a resolution; answers and ends come after it under
        // the same fence). Read before the transaction: while the record
        // still carries that fence, nothing else wrote it since.
        let log = self
            .attempts(AttemptFilter {
                key: Some(request.key.clone()),
                ..AttemptFilter::default()
            })
            .await?;
        let amended = log
            .iter()
            .rfind(|e| {
                e.fence == request.observed_fence
                    && (e.event.starts_execution() || e.event.is_resolution())
            })
            .map(|e| e.event)
            .filter(|e| {
                matches!(
                    e,
                    AttemptEvent::ResolvedReleased | AttemptEvent::ResolvedRejected
                )
            });
        self.transact(
            settle_call("amending a resolution", &request),
            Box::new(move |current, now, fences| {
                let record =
                    machine::amend_check(current, &request.key, request.observed_fence, now)?;
                let Some(amended) = amended else {
                    return Err(StoreError::NotEligible {
                        key: request.key.clone(),
                        action: "amended",
                        state: record.state,
                        why: not_a_person,
                    });
                };
                let note = format!(
                    "{AMENDS}{amended} at fence {}: {}",
                    request.observed_fence, request.reason
                );
                settled(record, fences.next_fence()?, &request, note, now)
            }),
        )
        .await
    }

    async fn get(&self, key: &RecordKey) -> Result<Option<RecordView>, StoreError> {
        let (record, now) = timed("get", self.read(key)).await?;
        Ok(machine::live(record, now).map(|r| RecordView::at(r, now)))
    }

    async fn get_many(&self, keys: &[RecordKey]) -> Result<Vec<Option<RecordView>>, StoreError> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let (records, now) = timed("get_many", self.read_keys(keys)).await?;
        if records.len() != keys.len() {
            return Err(StoreError::Task(format!(
                "the store read {} records for {} keys",
                records.len(),
                keys.len()
            )));
        }
        Ok(records
            .into_iter()
            .map(|r| machine::live(r, now).map(|r| RecordView::at(r, now)))
            .collect())
    }

    async fn list(&self, filter: ListFilter) -> Result<Vec<RecordView>, StoreError> {
        let (records, now) = self.read_many(&filter).await?;
        let limit = filter.limit.map_or(usize::MAX, |l| l as usize);
        Ok(records
            .into_iter()
            .filter(|r| filter.keeps(r))
            .take(limit)
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
                break;
            }
        }
        // Then the lookup index kept behind the writes, up to the records
        // there are now, in batches of its own between which claims get
        // the store.
        if let Some(upto) = self.index_end().await? {
            while self.index_batch(upto).await? > 0 {}
        }
        Ok(removed)
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
}

/// A refused holder write: a fenced one (the holder was deposed by a
/// take-over or a resolution, or its record was sent to review) is refused
/// *and* logged, so the log shows that a paused holder came back too late;
/// any other refusal writes nothing. A fence above the record's was never
/// handed out: that is a wrong request, not a deposed holder, and logging
/// it would let any caller grow the log without end.
pub(super) fn logged_if_fenced<T>(
    refused: StoreError,
    doing: &str,
    now: u64,
) -> Result<Step<T>, StoreError> {
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

/// The store call of a person's settlement: it draws a new fence.
fn settle_call(context: &'static str, request: &ResolveRequest) -> Call {
    Call {
        context,
        key: request.key.clone(),
        draws_fence: true,
        ownership: None,
    }
}

/// The write of a person's settlement under `fence`: the record as
/// resolved, and its log entry naming who (`by`) and `note` (the reason,
/// and for an amendment what it amends).
fn settled(
    record: crate::vocabulary::Record,
    fence: u64,
    request: &ResolveRequest,
    note: String,
    now: u64,
) -> Result<Step<RecordView>, StoreError> {
    let record = machine::resolved(record, fence, request, now);
    let mut entry = AttemptEntry::of_record(&record, request.resolution.event(), now);
    entry.actor = Some(bounded_note(request.by.clone()));
    entry.detail = Some(bounded_note(note));
    let view = RecordView::at(record.clone(), now);
    Ok(Step::put(record, view).logging(entry))
}
