//! What an effect in the store's own transaction shares with every other
//! end (`sqlite/in_tx.rs`, `postgres/in_tx.rs` and `postgres/caller_tx.rs`
//! run it): the fence check before the effect (`machine::holding`), the
//! completion decided by `machine::finish` inside the same transaction
//! (drawing no fence: [`NoFences`]), and the refused write of a deposed
//! holder logged once its transaction is rolled back.

use super::finishes::finish_decision;
use super::plain_call;
use crate::backend::{Call, Decide, Fences, RecordBackend, Step};
use crate::machine;
use crate::vocabulary::{Ending, Finish, Outcome, RecordKey, RecordState, StoreError};

/// What the completion of an effect in the store's transaction is: a
/// plain record call (no fence drawn, no ownership token).
pub(crate) fn completion_call(key: &RecordKey) -> Call {
    plain_call("completing an effect in the store's transaction", key)
}

/// The completion's decision: `machine::finish` to completed under
/// `fence`, logged, or the refusal (a deposed fence, a final record, a
/// record gone) that aborts the effect's transaction.
pub(crate) fn completion(
    key: &RecordKey,
    fence: u64,
    outcome: Outcome,
    limit: usize,
) -> Decide<()> {
    finish_decision(
        Finish {
            key: key.clone(),
            fence,
            ending: Ending::Completed,
            outcome,
        },
        limit,
    )
}

/// The fence source of a completion's decision: a completion never draws
/// a fence.
pub(crate) struct NoFences;

impl Fences for NoFences {
    fn next_fence(&mut self) -> Result<u64, StoreError> {
        Err(StoreError::InvalidRequest(
            "a completion draws no fence".into(),
        ))
    }
}

/// Logs a deposed holder's refused completion, in a transaction of its
/// own: the effect's transaction, which would have carried the entry, was
/// rolled back with the business writes. Answers the refusal as the store
/// now states it (the same one: a fence once deposed, a record once final
/// or gone, never become writable again under that fence); `refused` if
/// the log write itself fails, which changes nothing for the caller.
pub(crate) async fn log_refused<B: RecordBackend>(
    backend: &B,
    key: &RecordKey,
    fence: u64,
    refused: StoreError,
) -> StoreError {
    let limit = backend.options().max_outcome_bytes;
    let (k, original) = (key.clone(), refused.to_string());
    let decide: Decide<()> = Box::new(move |current, now, _| {
        // The state machine decides as it would for the completion; never
        // writes a record here, whatever it says.
        match machine::finish(
            current,
            &k,
            fence,
            RecordState::Completed,
            Outcome::default(),
            limit,
            now,
        ) {
            Err(refusal) => super::records::logged_if_fenced(refusal, "finishing", now),
            Ok(_) => Ok(Step::refuse(StoreError::InvalidRequest(original.clone()))),
        }
    });
    match backend.transact(completion_call(key), decide).await {
        Err(now) if now.is_conflict() => now,
        _ => refused,
    }
}
