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

use std::time::Duration;

use idem_core::RecordState;

use crate::attempt::{Resolution, ResolveRequest};
use crate::{
    Claim, ClaimRequest, Existing, Holder, JobLease, KeptOperation, MAX_ERROR_BYTES, Outcome,
    OwnershipToken, Record, RecordKey, RecordView, StoreError, StoreOptions, TRUNCATION_MARK,
};

/// Times are stored as SQL integers (i64): clamp so they always fit.
const MAX_TIME_MS: u64 = i64::MAX as u64;

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

/// Checks a claim request before anything is read.
pub(crate) fn validate(request: &ClaimRequest) -> Result<(), StoreError> {
    let hex = request.policy_digest.strip_prefix("sha256:");
    let ok = hex.is_some_and(|h| {
        h.len() == 64 && h.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    });
    if !ok {
        return Err(StoreError::InvalidRequest(format!(
            "policy digest `{}` is not `sha256:` followed by 64 lowercase hex characters",
            request.policy_digest
        )));
    }
    if let Some(KeptOperation::Kept(text)) = &request.operation
        && !text.starts_with('{')
    {
        return Err(StoreError::InvalidRequest(
            "a kept operation must be the operation's canonical JSON object".into(),
        ));
    }
    Ok(())
}

/// The request as a store keeps it: its operation bounded by `options`
/// (see [`KeptOperation::bounded`]). Every claim passes through here first,
/// so every store keeps the same.
pub(crate) fn kept(mut request: ClaimRequest, options: &StoreOptions) -> ClaimRequest {
    request.operation = request.operation.map(|o| o.bounded(options));
    request
}

/// What a claim does with the current record.
pub(crate) enum ClaimStep {
    /// No live record: allocate a fence and insert [`new_record`].
    Insert,
    /// A live record exists.
    Existing(Box<Existing>),
    /// The record is this very claim attempt's own (its token), still
    /// held: an earlier try of the same request committed and its answer
    /// was lost. The claim goes on as that one; nothing is written.
    Held(Box<Record>),
}

/// Decides a claim.
pub(crate) fn claim(current: Option<Record>, request: &ClaimRequest, now_ms: u64) -> ClaimStep {
    match live(current, now_ms) {
        None => ClaimStep::Insert,
        Some(record) if is_own_claim(&record, request, now_ms) => ClaimStep::Held(Box::new(record)),
        Some(record) => {
            let fingerprint_matches = record.fingerprint == request.fingerprint;
            ClaimStep::Existing(Box::new(Existing {
                view: RecordView::at(record, now_ms),
                fingerprint_matches,
            }))
        }
    }
}

/// Whether `record` is the claim `request` made on an earlier try: the
/// same attempt's token, the same operation, in progress and its lease
/// live. A lapsed one is left to the policy as any other: its lease ran
/// out while the answer was lost, and someone may be about to take it over.
fn is_own_claim(record: &Record, request: &ClaimRequest, now_ms: u64) -> bool {
    record.fingerprint == request.fingerprint && is_held_by(record, &request.holder, now_ms)
}

/// Whether `record` is in progress under a live lease held by the very
/// attempt `holder` stands for (its token).
fn is_held_by(record: &Record, holder: &Holder, now_ms: u64) -> bool {
    record.state == RecordState::InProgress
        && record.lease_until_ms > now_ms
        && record.holder.is_same_attempt(holder)
}

/// The same attempt twice in one batch of claims: the first makes the
/// claim, and a repeat (its token taken off) is a duplicate of it, never
/// the same claim a second time.
pub(crate) fn one_claim_per_attempt(requests: &mut [ClaimRequest]) {
    if requests.len() < 2 {
        return;
    }
    let mut attempts = std::collections::HashSet::new();
    for request in requests {
        if let Some(token) = request.holder.token
            && !attempts.insert((request.key.clone(), token))
        {
            request.holder.token = None;
        }
    }
}

/// The claim `holder`'s attempt already holds on `current`, when a
/// take-over sent again after its answer was lost finds it made.
pub(crate) fn held_by_attempt(
    current: Option<&Record>,
    holder: &Holder,
    now_ms: u64,
) -> Option<Claim> {
    current
        .filter(|r| !is_expired(r, now_ms) && is_held_by(r, holder, now_ms))
        .map(claim_of)
}

/// The record a successful claim inserts (replacing any expired one).
pub(crate) fn new_record(request: &ClaimRequest, fence: u64, now_ms: u64) -> Record {
    let lease_until_ms = after(now_ms, request.lease);
    let retention_ms = millis(request.retention);
    Record {
        key: request.key.clone(),
        policy_digest: request.policy_digest.clone(),
        fingerprint: request.fingerprint,
        partition: request.partition.clone(),
        state: RecordState::InProgress,
        fence,
        lease_until_ms,
        attempts: 1,
        created_ms: now_ms,
        updated_ms: now_ms,
        retention_ms,
        retain_until_ms: in_progress_retention(now_ms, retention_ms, lease_until_ms),
        outcome: None,
        holder: request.holder.clone(),
        operation: request.operation.clone(),
    }
}

/// An in-progress record is kept at least as long as its lease, so that a
/// live holder's record never counts as absent.
fn in_progress_retention(now_ms: u64, retention_ms: u64, lease_until_ms: u64) -> u64 {
    now_ms
        .saturating_add(retention_ms)
        .min(MAX_TIME_MS)
        .max(lease_until_ms)
}

/// The claim a record stands for.
pub(crate) fn claim_of(record: &Record) -> Claim {
    Claim {
        key: record.key.clone(),
        fence: record.fence,
        lease_until_ms: record.lease_until_ms,
        attempt: record.attempts,
    }
}

/// The live record under `key` carrying `fence`.
fn fenced(
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
fn held(
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

/// Checks that a take-over is allowed; the caller then allocates a fence
/// and calls [`taken_over`].
pub(crate) fn take_over_check(
    current: Option<Record>,
    key: &RecordKey,
    observed_fence: u64,
    now_ms: u64,
) -> Result<Record, StoreError> {
    let record = fenced(current, key, observed_fence, now_ms)?;
    let refuse = |why| {
        Err(StoreError::NotEligible {
            key: key.clone(),
            action: "taken over",
            state: record.state,
            why,
        })
    };
    match record.state {
        RecordState::FailedRetryable | RecordState::OutcomeUnknown => Ok(record),
        RecordState::InProgress if record.lease_until_ms <= now_ms => Ok(record),
        RecordState::InProgress => refuse("its holder's lease is still live"),
        RecordState::Completed | RecordState::FailedPermanent => {
            refuse("a final record is never executed again")
        }
    }
}

/// The record after a take-over under `fence`.
pub(crate) fn taken_over(
    mut record: Record,
    fence: u64,
    lease: Duration,
    holder: Holder,
    now_ms: u64,
) -> Record {
    record.state = RecordState::InProgress;
    record.fence = fence;
    record.lease_until_ms = after(now_ms, lease);
    record.attempts = record.attempts.saturating_add(1);
    record.updated_ms = now_ms;
    record.retain_until_ms =
        in_progress_retention(now_ms, record.retention_ms, record.lease_until_ms);
    // The outcome belongs to a finished attempt; a new one is running.
    record.outcome = None;
    record.holder = holder;
    record
}

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
    let refuse = |why| {
        Err(StoreError::NotEligible {
            key: key.clone(),
            action: "resolved",
            state: record.state,
            why,
        })
    };
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

/// Checks a resolution before anything is read: who and why, and a
/// completed outcome within the body cap.
pub(crate) fn check_resolution(request: &ResolveRequest, limit: usize) -> Result<(), StoreError> {
    check_name("resolver (--by)", &request.by)?;
    if request.reason.trim().is_empty() {
        return Err(StoreError::InvalidRequest(
            "a resolution needs a reason (who asked, what was checked)".into(),
        ));
    }
    // The log keeps a note of at most this size: refuse, rather than keep
    // a reason cut short without saying so.
    if request.reason.len() > crate::attempt::MAX_NOTE_BYTES {
        return Err(StoreError::InvalidRequest(format!(
            "a resolution's reason is {} bytes; at most {} are kept: say it shorter (a ticket link, what was checked)",
            request.reason.len(),
            crate::attempt::MAX_NOTE_BYTES
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

/// Enforces the body cap and cuts the error text.
pub(crate) fn checked_outcome(
    key: &RecordKey,
    mut outcome: Outcome,
    limit: usize,
) -> Result<Outcome, StoreError> {
    if outcome.body.len() > limit {
        return Err(StoreError::OutcomeTooLarge {
            key: key.clone(),
            size: outcome.body.len(),
            limit,
        });
    }
    if let Some(error) = &mut outcome.error {
        truncate_error(error);
    }
    Ok(outcome)
}

/// Cuts error text to [`MAX_ERROR_BYTES`] (mark included), on a character
/// boundary.
pub(crate) fn truncate_error(error: &mut String) {
    if error.len() <= MAX_ERROR_BYTES {
        return;
    }
    let mut end = MAX_ERROR_BYTES - TRUNCATION_MARK.len();
    while !error.is_char_boundary(end) {
        end -= 1;
    }
    error.truncate(end);
    error.push_str(TRUNCATION_MARK);
}

/// The record after its holder finished: completed, failed-retryable or
/// failed-permanent.
pub(crate) fn finish(
    current: Option<Record>,
    key: &RecordKey,
    fence: u64,
    state: RecordState,
    outcome: Outcome,
    limit: usize,
    now_ms: u64,
) -> Result<Record, StoreError> {
    let outcome = checked_outcome(key, outcome, limit)?;
    let mut record = held(current, key, fence, now_ms)?;
    record.state = state;
    record.outcome = Some(outcome);
    record.updated_ms = now_ms;
    record.retain_until_ms = now_ms.saturating_add(record.retention_ms).min(MAX_TIME_MS);
    Ok(record)
}

/// The record after a heartbeat: lease until `now + lease`.
pub(crate) fn heartbeat(
    current: Option<Record>,
    key: &RecordKey,
    fence: u64,
    lease: Duration,
    now_ms: u64,
) -> Result<Record, StoreError> {
    let mut record = held(current, key, fence, now_ms)?;
    record.lease_until_ms = after(now_ms, lease);
    record.updated_ms = now_ms;
    record.retain_until_ms = record.retain_until_ms.max(record.lease_until_ms);
    Ok(record)
}

/// Longest group, member, job or job-holder name, in bytes.
pub(crate) const MAX_NAME_BYTES: usize = 256;

/// Checks a group, member, job or holder name: non-empty, at most
/// [`MAX_NAME_BYTES`], no control characters (so that a store may join
/// names with a newline).
pub(crate) fn check_name(what: &str, name: &str) -> Result<(), StoreError> {
    if name.is_empty() || name.len() > MAX_NAME_BYTES || name.chars().any(char::is_control) {
        return Err(StoreError::InvalidRequest(format!(
            "{what} `{}` must be 1 to {MAX_NAME_BYTES} bytes without control characters",
            name.escape_debug()
        )));
    }
    Ok(())
}

/// A membership as every store keeps it: sorted, without repeats, at
/// least one member, every name checked. Order and repeats carry no
/// meaning for ownership ([`idem_core::ownership::owner`]), so two workers
/// listing the same members differently register the same membership.
pub(crate) fn normalize_members(
    group: &str,
    members: &[String],
) -> Result<Vec<String>, StoreError> {
    check_name("group", group)?;
    if members.is_empty() {
        return Err(StoreError::InvalidRequest(format!(
            "the membership of group `{group}` has no members"
        )));
    }
    for m in members {
        check_name("member", m)?;
    }
    let mut sorted = members.to_vec();
    sorted.sort();
    sorted.dedup();
    Ok(sorted)
}

/// Whether joining with `members` (normalised) changes what is stored, i.e.
/// needs a new epoch.
pub(crate) fn membership_changes(stored: Option<&[String]>, members: &[String]) -> bool {
    stored != Some(members)
}

/// Checks a claim's or take-over's ownership token against the group's
/// current epoch (`None` when the group has no membership). Any epoch but
/// the current one is refused: an older one was superseded, and a newer one
/// (or one for a group with no membership) was never issued by this store.
pub(crate) fn check_epoch(
    token: Option<&OwnershipToken>,
    current: Option<u64>,
) -> Result<(), StoreError> {
    match token {
        Some(t) if current != Some(t.epoch) => Err(StoreError::StaleEpoch {
            group: t.group.clone(),
            epoch: t.epoch,
            current: current.unwrap_or(0),
        }),
        _ => Ok(()),
    }
}

/// What acquiring a job lease does with the current one.
pub(crate) enum JobStep {
    /// No live lease: allocate a fence and take it.
    Take,
    /// A live lease, and how long it has left.
    Held(JobLease, u64),
}

/// Decides a job-lease acquisition: a lease whose end is at or before now
/// is over (the same rule as a record's lease).
pub(crate) fn acquire_job(current: Option<JobLease>, now_ms: u64) -> JobStep {
    match current {
        Some(lease) if lease.lease_until_ms > now_ms => {
            let left = lease.lease_until_ms - now_ms;
            JobStep::Held(lease, left)
        }
        _ => JobStep::Take,
    }
}

/// The job lease held under `fence`, else [`StoreError::JobLeaseLost`]. As
/// for records, the fence decides, not the lease: an expired lease nobody
/// took may still be heartbeated or released.
pub(crate) fn job_held(
    current: Option<JobLease>,
    job: &str,
    fence: u64,
) -> Result<JobLease, StoreError> {
    match current {
        Some(lease) if lease.fence == fence => Ok(lease),
        _ => Err(StoreError::JobLeaseLost {
            job: job.to_string(),
            fence,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_text_is_cut_on_a_char_boundary() {
        let mut text = "é".repeat(MAX_ERROR_BYTES);
        truncate_error(&mut text);
        assert!(text.len() <= MAX_ERROR_BYTES);
        assert!(text.ends_with(TRUNCATION_MARK));
        let mut short = "short".to_string();
        truncate_error(&mut short);
        assert_eq!(short, "short");
    }

    #[test]
    fn times_are_clamped() {
        assert_eq!(after(5, Duration::MAX), MAX_TIME_MS);
        assert_eq!(after(5, Duration::from_millis(10)), 15);
    }
}
