//! The record state machine as pure functions.
//!
//! Every store runs a call the same way: inside one transaction it reads the
//! store clock and the current record, asks a function here what to do, and
//! writes the record it returns. Keeping the transitions here, free of I/O,
//! means the memory, SQLite and PostgreSQL stores cannot drift apart: each
//! runs these functions in its record transaction, and PostgreSQL's
//! one-statement fast paths, which mirror them in SQL, are checked against
//! them in debug builds. The conformance suite checks every store against
//! an independent model.
//!
//! One file per decision: `claim.rs` (claims and take-overs), `finish.rs`
//! (a holder's end and heartbeat), `review.rs` (sent to review, resolved by
//! a person), `ownership.rs` (memberships, epochs, job leases),
//! `activation.rs` (a policy version activated or rolled back in its
//! namespace), `gate.rs` (the gate a downstream keeps); here what they
//! share: time arithmetic, "counts as absent", the fence checks.

use std::time::Duration;

use idem_core::RecordState;

mod activation;
mod claim;
mod finish;
pub(crate) mod gate;
mod ownership;
mod review;

pub(crate) use activation::{Change, activate, rollback};
pub(crate) use claim::{
    ClaimDecision, claim, claim_of, held_by_attempt, kept, new_record, one_claim_per_attempt,
    take_over_check, taken_over, validate,
};
use finish::truncate_error;
pub(crate) use finish::{checked_outcome, finish, heartbeat};
pub(crate) use ownership::{
    JobStep, acquire_job, check_epoch, check_name, job_held, membership_changes, normalize_members,
};
pub(crate) use review::{amend_check, check_resolution, mark_unknown, resolve_check, resolved};

use crate::{Record, RecordKey, StoreError};

/// Refuses a text no store keeps ([`idem_core::text::unstorable`]: a NUL),
/// the same on every store, before anything is read: `what` names it.
pub(crate) fn storable(what: &str, text: &str) -> Result<(), StoreError> {
    match idem_core::text::unstorable(text) {
        Some(why) => Err(StoreError::InvalidRequest(format!("{what} {why}"))),
        None => Ok(()),
    }
}

/// Times are stored as SQL integers (i64): clamp so they always fit.
pub(super) const MAX_TIME_MS: u64 = i64::MAX as u64;

/// `now + d`, clamped to what a store can hold.
pub(crate) fn after(now_ms: u64, d: Duration) -> u64 {
    let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    now_ms.saturating_add(ms).min(MAX_TIME_MS)
}

/// Milliseconds of a duration, clamped like [`after`].
pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis())
        .unwrap_or(u64::MAX)
        .min(MAX_TIME_MS)
}

/// Whether a record is past its retention, i.e. counts as absent. An
/// in-progress record whose lease is live never is.
pub(crate) fn is_expired(record: &Record, now_ms: u64) -> bool {
    let live_lease = record.state == RecordState::InProgress && record.lease_until_ms > now_ms;
    record.retain_until_ms < now_ms && !live_lease
}

/// The record, unless it counts as absent.
pub(crate) fn live(record: Option<Record>, now_ms: u64) -> Option<Record> {
    record.filter(|r| !is_expired(r, now_ms))
}

/// An in-progress record is kept at least as long as its lease, so that a
/// live holder's record never counts as absent.
pub(super) fn in_progress_retention(now_ms: u64, retention_ms: u64, lease_until_ms: u64) -> u64 {
    now_ms
        .saturating_add(retention_ms)
        .min(MAX_TIME_MS)
        .max(lease_until_ms)
}

/// The live record under `key` carrying `fence`.
pub(super) fn fenced(
    current: Option<Record>,
    key: &RecordKey,
    fence: u64,
    now_ms: u64,
) -> Result<Record, StoreError> {
    let record = live(current, now_ms).ok_or_else(|| StoreError::Gone { key: key.clone() })?;
    if record.fence != fence {
        return Err(StoreError::Fenced {
            key: key.clone(),
            fence,
            current: record.fence,
        });
    }
    Ok(record)
}

/// The live in-progress record under `key` held with `fence`: the
/// precondition of every holder write. A lease that expired does not matter
/// while the fence is current (nobody took over yet).
pub(super) fn held(
    current: Option<Record>,
    key: &RecordKey,
    fence: u64,
    now_ms: u64,
) -> Result<Record, StoreError> {
    let record = fenced(current, key, fence, now_ms)?;
    if record.state != RecordState::InProgress {
        return Err(StoreError::NotInProgress {
            key: key.clone(),
            fence,
            state: record.state,
        });
    }
    Ok(record)
}

/// Whether the holder of `fence` may write `key`'s record: [`held`]'s
/// check, without the record.
pub(crate) fn holding(
    current: Option<Record>,
    key: &RecordKey,
    fence: u64,
    now_ms: u64,
) -> Result<(), StoreError> {
    held(current, key, fence, now_ms).map(|_| ())
}

/// A record that may not take `action` (a take-over, a resolution) in its
/// state, and why.
pub(super) fn not_eligible(
    key: &RecordKey,
    action: &'static str,
    record: &Record,
    why: &'static str,
) -> StoreError {
    StoreError::NotEligible {
        key: key.clone(),
        action,
        state: record.state,
        why,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_clamped() {
        assert_eq!(after(5, Duration::MAX), MAX_TIME_MS);
        assert_eq!(after(5, Duration::from_millis(10)), 15);
    }
}
