//! The debug check of a fast path: what a backend's one-statement write
//! put in the row must be exactly what the machine decides.

use crate::backend::Written;
use crate::machine;
use crate::vocabulary::{Claim, ClaimRequest, Outcome, Record, RecordKey, RecordState};

/// The claim a fast path made, as the machine makes it; in debug builds
/// the row the backend wrote must be exactly the machine's record.
pub(super) fn fresh_claim(
    path: &str,
    request: &ClaimRequest,
    written: &Written,
) -> (Record, Claim) {
    let record = machine::new_record(request, written.fence, written.now_ms);
    check_written(path, &record, written);
    let claim = machine::claim_of(&record);
    (record, claim)
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
pub(super) fn check_finished(
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
