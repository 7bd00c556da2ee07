//! A holder's end: one alone (fast path, else the record transaction), and
//! many (the backend's batch statement, else one shared transaction, else
//! one at a time).

use super::checked::check_finished;
use super::{
    Prepared, Slot, first_occurrences, in_one_transaction, mapped, one_at_a_time, plain_call,
};
use crate::backend::{Decide, RecordBackend, Step};
use crate::machine;
use crate::vocabulary::StoreError;
use crate::vocabulary::end_note;
use crate::vocabulary::{AttemptEntry, AttemptEvent};
use crate::vocabulary::{Finish, Outcome, RecordKey, RecordState};

/// A holder's completion or failure, its outcome checked: the fast path
/// when the backend has one, else (and whenever the fast path wrote
/// nothing or failed) the record transaction, which says exactly why it
/// refuses.
async fn finish_checked<B: RecordBackend>(backend: &B, finish: Finish) -> Result<(), StoreError> {
    let limit = backend.options().max_outcome_bytes;
    let state = finish.ending.state();
    if let Ok(Some(written)) = backend
        .fast_finish(&finish.key, finish.fence, state, &finish.outcome)
        .await
    {
        check_finished(
            &finish.key,
            finish.fence,
            state,
            &finish.outcome,
            limit,
            &written,
        );
        return Ok(());
    }
    finish_transaction(backend, finish).await
}

/// A finish (its outcome checked) decided in the record transaction, which
/// says exactly why it refuses.
pub(super) async fn finish_transaction<B: RecordBackend>(
    backend: &B,
    finish: Finish,
) -> Result<(), StoreError> {
    let limit = backend.options().max_outcome_bytes;
    let call = plain_call("finishing an attempt", &finish.key);
    backend.transact(call, finish_decision(finish, limit)).await
}

/// One finish: its outcome checked (too large: refused), then written.
pub(super) async fn finish<B: RecordBackend>(
    backend: &B,
    finish: Finish,
) -> Result<(), StoreError> {
    let finish = checked(backend, finish)?;
    finish_checked(backend, finish).await
}

/// `finish` with its outcome checked against the store's limit.
pub(super) fn checked<B: RecordBackend>(backend: &B, finish: Finish) -> Result<Finish, StoreError> {
    let Finish {
        key,
        fence,
        ending,
        outcome,
    } = finish;
    let outcome = machine::checked_outcome(&key, outcome, backend.options().max_outcome_bytes)?;
    Ok(Finish {
        key,
        fence,
        ending,
        outcome,
    })
}

/// The finish decision: `machine::finish` of the record as read.
pub(super) fn finish_decision(finish: Finish, limit: usize) -> Decide<()> {
    let state = finish.ending.state();
    Box::new(move |current, now, _| {
        match machine::finish(
            current,
            &finish.key,
            finish.fence,
            state,
            finish.outcome.clone(),
            limit,
            now,
        ) {
            Ok(record) => {
                let mut entry = AttemptEntry::of_record(&record, ended(state), now);
                entry.detail = end_note(state, &finish.outcome);
                Ok(Step::put(record, ()).logging(entry))
            }
            Err(refused) => super::records::logged_if_fenced(refused, "finishing", now),
        }
    })
}

/// A finish of a batch, prepared for one shared transaction: refused now
/// when its outcome is too large.
pub(super) fn prepared_finish<B: RecordBackend, T: Send + 'static>(
    backend: &B,
    finish: Finish,
    answer: fn(()) -> T,
) -> Prepared<T> {
    match checked(backend, finish) {
        Err(refused) => Prepared::Answered(Err(refused)),
        Ok(finish) => Prepared::Call(
            plain_call("finishing an attempt", &finish.key),
            mapped(
                finish_decision(finish, backend.options().max_outcome_bytes),
                answer,
            ),
        ),
    }
}

/// The log event of a holder's end.
pub(crate) fn ended(state: RecordState) -> AttemptEvent {
    match state {
        RecordState::Completed => AttemptEvent::Completed,
        RecordState::FailedRetryable => AttemptEvent::FailedRetryable,
        _ => AttemptEvent::FailedPermanent,
    }
}

/// `Writes::finish_many`: outcomes checked first (too large: refused
/// alone), then the backend's batch statement, or one shared transaction,
/// or one finish at a time.
pub(super) async fn finish_many<B: RecordBackend>(
    backend: &B,
    finishes: Vec<Finish>,
) -> Result<Vec<Result<(), StoreError>>, StoreError> {
    let limit = backend.options().max_outcome_bytes;
    // Outcomes checked in place (moved, never copied: a body may be large);
    // a refused one is that finish's answer alone.
    let mut refused = Vec::with_capacity(finishes.len());
    let mut checked_finishes = Vec::with_capacity(finishes.len());
    for Finish {
        key,
        fence,
        ending,
        outcome,
    } in finishes
    {
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
        checked_finishes.push(Finish {
            key,
            fence,
            ending,
            outcome,
        });
    }
    let (mut slots, sent) = first_occurrences(
        checked_finishes
            .iter()
            .map(|f| &f.key)
            .zip(refused)
            .collect::<Vec<(&RecordKey, Option<StoreError>)>>(),
    );
    let batch: Vec<&Finish> = sent.iter().map(|&i| &checked_finishes[i]).collect();
    let answers = if batch.len() >= 2 {
        backend.batch_finish(&batch).await?
    } else {
        None
    };
    match answers {
        Some(answers) => {
            for (&i, answer) in sent.iter().zip(answers) {
                if let Some(written) = answer {
                    let f = &checked_finishes[i];
                    let state = f.ending.state();
                    check_finished(&f.key, f.fence, state, &f.outcome, limit, &written);
                    slots[i] = Slot::Done(Ok(()));
                }
            }
        }
        None if backend.batching().one_transaction => {
            let prepared = slots
                .into_iter()
                .zip(checked_finishes)
                .map(|(slot, f)| match slot {
                    Slot::Done(answer) => Prepared::Answered(answer),
                    _ => Prepared::Call(
                        plain_call("finishing an attempt", &f.key),
                        finish_decision(f, limit),
                    ),
                })
                .collect();
            return in_one_transaction(backend, prepared).await;
        }
        None => {}
    }
    // Everything the statement did not write, and repeated keys after
    // their first occurrence: the single path decides, in order.
    Ok(one_at_a_time(slots, checked_finishes, |f| finish_checked(backend, f)).await)
}
