//! Review: a record sent to review (outcome-unknown) when its lease ran
//! out, and a person's resolution of it under a new fence.

use idem_core::RecordState;

use super::{MAX_TIME_MS, check_name, checked_outcome, fenced, not_eligible, truncate_error};
use crate::vocabulary::{Resolution, ResolveRequest};
use crate::{Outcome, Record, RecordKey, StoreError};

/// The record after mark-unknown, or `None` when it already is
/// outcome-unknown under `observed_fence` (nothing to write).
pub(crate) fn mark_unknown(
    current: Option<Record>,
    key: &RecordKey,
    observed_fence: u64,
    now_ms: u64,
) -> Result<Option<Record>, StoreError> {
    let mut record = fenced(current, key, observed_fence, now_ms)?;
    let refuse = |why| {
        Err(StoreError::NotEligible {
            key: key.clone(),
            action: "marked outcome-unknown",
            state: record.state,
            why,
        })
    };
    match record.state {
        RecordState::OutcomeUnknown => Ok(None),
        RecordState::InProgress if record.lease_until_ms <= now_ms => {
            record.state = RecordState::OutcomeUnknown;
            record.updated_ms = now_ms;
            record.retain_until_ms = now_ms.saturating_add(record.retention_ms).min(MAX_TIME_MS);
            Ok(Some(record))
        }
        RecordState::InProgress => refuse("its holder's lease is still live"),
        _ => refuse("only an in-progress record whose lease expired can be"),
    }
}

/// Checks that a person may resolve the record: it carries
/// `observed_fence` and waits for review (outcome-unknown, or in progress
/// with its lease expired). The caller then allocates a fence and calls
/// [`resolved`].
pub(crate) fn resolve_check(
    current: Option<Record>,
    key: &RecordKey,
    observed_fence: u64,
    now_ms: u64,
) -> Result<Record, StoreError> {
    let record = fenced(current, key, observed_fence, now_ms)?;
    let refuse = |why| Err(not_eligible(key, "resolved", &record, why));
    match record.state {
        RecordState::OutcomeUnknown => Ok(record),
        RecordState::InProgress if record.lease_until_ms <= now_ms => Ok(record),
        RecordState::InProgress => {
            refuse("its holder's lease is still live: it may still finish on its own")
        }
        _ => refuse(
            "only a record waiting for review (outcome-unknown, or in progress past its lease) can be",
        ),
    }
}

/// Checks that a person may amend the resolution that wrote the record's
/// fence: it carries `observed_fence` and is a release (failed-retryable)
/// or a rejection (failed-permanent). A completed record is never
/// overwritten, a person's completion included (it may have been replayed).
/// That a *person* wrote this fence is the caller's check, read from the
/// attempt log before the transaction: no holder ever writes under a
/// resolution's fence, so while the record still carries it, nothing else
/// wrote the record since. The caller then allocates a fence and calls
/// [`resolved`].
pub(crate) fn amend_check(
    current: Option<Record>,
    key: &RecordKey,
    observed_fence: u64,
    now_ms: u64,
) -> Result<Record, StoreError> {
    let record = fenced(current, key, observed_fence, now_ms)?;
    match record.state {
        RecordState::FailedRetryable | RecordState::FailedPermanent => Ok(record),
        RecordState::Completed => Err(not_eligible(
            key,
            "amended",
            &record,
            "a completed record is never overwritten (its outcome may have been replayed)",
        )),
        _ => Err(not_eligible(
            key,
            "amended",
            &record,
            "it waits for review: settle it (only a person's release or rejection can be amended)",
        )),
    }
}

/// Checks a resolution before anything is read: who and why, and a
/// completed outcome within the body cap.
pub(crate) fn check_resolution(request: &ResolveRequest, limit: usize) -> Result<(), StoreError> {
    check_name("resolver (--by)", &request.by)?;
    super::storable("a resolution's reason", &request.reason)?;
    if request.reason.trim().is_empty() {
        return Err(StoreError::InvalidRequest(
            "a resolution needs a reason (who asked, what was checked)".into(),
        ));
    }
    // The log keeps a note of at most this size: refuse, rather than keep
    // a reason cut short without saying so.
    if request.reason.len() > crate::vocabulary::MAX_NOTE_BYTES {
        return Err(StoreError::InvalidRequest(format!(
            "a resolution's reason is {} bytes; at most {} are kept: say it shorter (a ticket link, what was checked)",
            request.reason.len(),
            crate::vocabulary::MAX_NOTE_BYTES
        )));
    }
    if let Resolution::Completed(outcome) = &request.resolution {
        checked_outcome(&request.key, outcome.clone(), limit)?;
    }
    Ok(())
}

/// The record after a person's resolution under the new `fence`: completed
/// with the given outcome, failed-retryable (released) or failed-permanent
/// (rejected), kept for its retention from now; the resolver becomes its
/// holder.
pub(crate) fn resolved(
    mut record: Record,
    fence: u64,
    request: &ResolveRequest,
    now_ms: u64,
) -> Record {
    let note = |verb: &str| format!("{verb} by {}: {}", request.by, request.reason);
    let (state, outcome) = match &request.resolution {
        Resolution::Completed(outcome) => (RecordState::Completed, outcome.clone()),
        Resolution::Release => (
            RecordState::FailedRetryable,
            Outcome::error(0, note("released for re-execution")),
        ),
        Resolution::Reject { status } => (
            RecordState::FailedPermanent,
            Outcome::error(*status, note("rejected")),
        ),
    };
    let mut outcome = outcome;
    if let Some(error) = &mut outcome.error {
        truncate_error(error);
    }
    record.state = state;
    record.outcome = Some(outcome);
    record.fence = fence;
    record.lease_until_ms = now_ms;
    record.updated_ms = now_ms;
    record.retain_until_ms = now_ms.saturating_add(record.retention_ms).min(MAX_TIME_MS);
    record.holder = request.holder.clone();
    record
}
