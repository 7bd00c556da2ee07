//! Waiting for peers ([`super::JobOptions::wait_for_peers`]): an operation
//! another live run holds is watched until that run records its end (or its
//! claim lapses), and then begun again, so this run reports how it ended
//! (usually a replay) instead of "in progress". Two overlapping runs of the
//! same nightly job then both account for every operation.
//!
//! The waiting operation holds no concurrency slot while it waits: the run
//! goes on with the others.

use std::time::Duration;

use idem_store::{RecordKey, RecordState, Store, StoreError};
use tokio::time::Instant;

use super::outage;

/// The first pause between two looks at a record; it doubles up to
/// [`MAX_POLL`]. Short enough that a peer's quick end is seen at once, long
/// enough that thousands of waiting operations are a light load.
const FIRST_POLL: Duration = Duration::from_millis(20);
const MAX_POLL: Duration = Duration::from_secs(1);

/// Whether the record under `key` is still held by a live claim after
/// waiting up to `max`: `false` once it ended (or its lease lapsed, or it
/// is gone), `true` if `max` passed first. Each look rides out an outage
/// for up to `budget` (`waiting` is told at its first failure).
pub(crate) async fn still_held_after(
    store: &Store,
    key: &RecordKey,
    max: Duration,
    budget: Duration,
    waiting: impl Fn(&StoreError),
) -> Result<bool, StoreError> {
    let deadline = Instant::now().checked_add(max);
    let mut pause = FIRST_POLL;
    loop {
        let look = || store.records().get(key);
        let held =
            match outage::riding_out(budget, look, StoreError::is_unavailable, &waiting).await? {
                Some(view) => {
                    view.record.state == RecordState::InProgress && view.lease_remaining_ms > 0
                }
                None => false,
            };
        if !held {
            return Ok(false);
        }
        let now = Instant::now();
        let mut sleep = pause;
        if let Some(deadline) = deadline {
            if now >= deadline {
                return Ok(true);
            }
            sleep = sleep.min(deadline - now);
        }
        tokio::time::sleep(sleep).await;
        pause = (pause * 2).min(MAX_POLL);
    }
}
