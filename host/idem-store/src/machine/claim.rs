//! Claims and take-overs: who may start an effect, under which fence.

use std::time::Duration;

use idem_core::RecordState;

use super::{
    after, fenced, in_progress_retention, is_expired, live, millis, not_eligible, storable,
};
use crate::{
    Claim, ClaimRequest, Existing, Holder, KeptOperation, Record, RecordKey, RecordView,
    StoreError, StoreOptions,
};

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
    storable("the namespace", &request.key.namespace)?;
    storable("the partition", &request.partition)?;
    let holder = &request.holder;
    storable("the holder's host", &holder.host)?;
    for (what, text) in [
        ("the holder's run id", &holder.run_id),
        ("the holder's trigger", &holder.trigger),
    ] {
        if let Some(text) = text {
            storable(what, text)?;
        }
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
pub(crate) enum ClaimDecision {
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
pub(crate) fn claim(current: Option<Record>, request: &ClaimRequest, now_ms: u64) -> ClaimDecision {
    match live(current, now_ms) {
        None => ClaimDecision::Insert,
        Some(record) if is_own_claim(&record, request, now_ms) => {
            ClaimDecision::Held(Box::new(record))
        }
        Some(record) => {
            let fingerprint_matches = record.fingerprint == request.fingerprint;
            ClaimDecision::Existing(Box::new(Existing {
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
        effect_atomic: request.effect_atomic,
    }
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

/// Checks that a take-over is allowed; the caller then allocates a fence
/// and calls [`taken_over`].
pub(crate) fn take_over_check(
    current: Option<Record>,
    key: &RecordKey,
    observed_fence: u64,
    now_ms: u64,
) -> Result<Record, StoreError> {
    let record = fenced(current, key, observed_fence, now_ms)?;
    let refuse = |why| Err(not_eligible(key, "taken over", &record, why));
    match record.state {
        RecordState::FailedRetryable | RecordState::OutcomeUnknown => Ok(record),
        RecordState::InProgress if record.lease_until_ms <= now_ms => Ok(record),
        RecordState::InProgress => refuse("its holder's lease is still live"),
        RecordState::Completed | RecordState::FailedPermanent => {
            refuse("a final record is never executed again")
        }
    }
}

/// The record after a take-over under `fence` by `holder`, whose effect
/// commits with its end when `effect_atomic`: the flag describes the
/// attempt running now, so the taker's replaces the deposed holder's (an
/// attempt that ends otherwise must never inherit "nothing was done").
pub(crate) fn taken_over(
    mut record: Record,
    fence: u64,
    lease: Duration,
    holder: Holder,
    effect_atomic: bool,
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
    record.effect_atomic = effect_atomic;
    record
}
