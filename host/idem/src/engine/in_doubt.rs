//! A holder's end whose first write may have committed unseen.
//!
//! A completion sent just before the store went away (the connection
//! dropped after COMMIT was sent, the server crashed after it made the
//! commit durable) may have been recorded although the caller got an
//! error. Sent again, the same fence-conditional write is refused: the
//! record is no longer in progress. That refusal is only the echo of the
//! caller's own write when the record is still held under the caller's
//! fence, in the state the end gives, with the same status and body — no
//! one else writes under a fence (a person's resolution and a take-over
//! each take a new one) — and then the retry has succeeded. Anything else
//! stays the refusal it is.

use idem_store::{Ending, Outcome, RecordKey, Store, StoreError};

/// Whether `refused`, the store's answer to writing `ending` and `outcome`
/// under `fence`, means the same end was already recorded under that fence
/// (read back from the store to be sure).
pub(crate) async fn already_recorded(
    store: &Store,
    key: &RecordKey,
    fence: u64,
    ending: Ending,
    outcome: &Outcome,
    refused: &StoreError,
) -> bool {
    let StoreError::NotInProgress {
        fence: current,
        state,
        ..
    } = refused
    else {
        return false;
    };
    if *current != fence || *state != ending.state() {
        return false;
    }
    match store.records().get(key).await {
        Ok(Some(view)) => {
            let record = &view.record;
            record.fence == fence
                && record.state == ending.state()
                && record
                    .outcome
                    .as_ref()
                    .is_some_and(|o| o.status == outcome.status && o.body == outcome.body)
        }
        // Unreadable or gone: the refusal stands.
        _ => false,
    }
}
