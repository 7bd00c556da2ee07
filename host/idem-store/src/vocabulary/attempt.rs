//! The attempt log: an append-only history of every claim, answer, end,
//! fenced write and resolution, kept beside the records it describes.
//!
//! A record says where an effect stands; the log says how it got there —
//! which runs asked for it, under which fences, and what each was told — so
//! that a person (or the classifier in the `idem` library) can say *why* a
//! job ran twice. Every entry that describes a record change is written in
//! the same transaction as the change (a claim, a take-over, a finish, a
//! mark-unknown, a resolution, and a refused write that came too late); an
//! answer that changes no record (a replay, in progress, a conflict, a
//! rejection) is appended by [`crate::Records::log_answers`]. Entries are
//! removed with their record by [`crate::Records::gc`].

use std::fmt;
use std::str::FromStr;

use super::Holder;
use super::{Digest, Outcome, Record, RecordKey, RecordState};

/// Longest resolution reason or actor name kept, in bytes; longer text is
/// cut like an outcome's error text.
pub const MAX_NOTE_BYTES: usize = 1024;

/// What an attempt-log entry records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum AttemptEvent {
    /// A claim made a fresh record: the claimer executes under a new fence.
    Executed,
    /// A claim took over an earlier attempt (a retryable failure, an unknown
    /// outcome or an expired lease) under a new, higher fence.
    TakenOver,
    /// The holder completed.
    Completed,
    /// The holder failed, retryably.
    FailedRetryable,
    /// The holder failed for good.
    FailedPermanent,
    /// An expired in-progress claim was sent to review (outcome-unknown).
    MarkedUnknown,
    /// A write under a deposed fence was refused (a holder that came back
    /// after someone took over, or after a resolution).
    Fenced,
    /// A duplicate was handed the stored outcome.
    Replayed,
    /// A duplicate was told another holder is performing the effect.
    InProgress,
    /// A duplicate reused the key for a different request (fingerprint
    /// mismatch).
    Conflict,
    /// The policy rejected a duplicate.
    Rejected,
    /// A person recorded the effect as done.
    ResolvedCompleted,
    /// A person released the record for re-execution.
    ResolvedReleased,
    /// A person rejected the record: later duplicates get the rejection.
    ResolvedRejected,
}

impl AttemptEvent {
    /// Every event, in declaration order.
    pub const ALL: [AttemptEvent; 14] = [
        AttemptEvent::Executed,
        AttemptEvent::TakenOver,
        AttemptEvent::Completed,
        AttemptEvent::FailedRetryable,
        AttemptEvent::FailedPermanent,
        AttemptEvent::MarkedUnknown,
        AttemptEvent::Fenced,
        AttemptEvent::Replayed,
        AttemptEvent::InProgress,
        AttemptEvent::Conflict,
        AttemptEvent::Rejected,
        AttemptEvent::ResolvedCompleted,
        AttemptEvent::ResolvedReleased,
        AttemptEvent::ResolvedRejected,
    ];

    /// The stored spelling (`executed`, `taken-over`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            AttemptEvent::Executed => "executed",
            AttemptEvent::TakenOver => "taken-over",
            AttemptEvent::Completed => "completed",
            AttemptEvent::FailedRetryable => "failed-retryable",
            AttemptEvent::FailedPermanent => "failed-permanent",
            AttemptEvent::MarkedUnknown => "marked-unknown",
            AttemptEvent::Fenced => "fenced",
            AttemptEvent::Replayed => "replayed",
            AttemptEvent::InProgress => "in-progress",
            AttemptEvent::Conflict => "conflict",
            AttemptEvent::Rejected => "rejected",
            AttemptEvent::ResolvedCompleted => "resolved-completed",
            AttemptEvent::ResolvedReleased => "resolved-released",
            AttemptEvent::ResolvedRejected => "resolved-rejected",
        }
    }

    /// Whether the entry started an execution of the effect (a fresh claim
    /// or a take-over): the attempts that may have charged.
    pub fn starts_execution(self) -> bool {
        matches!(self, AttemptEvent::Executed | AttemptEvent::TakenOver)
    }

    /// Whether a person wrote it.
    pub fn is_resolution(self) -> bool {
        matches!(
            self,
            AttemptEvent::ResolvedCompleted
                | AttemptEvent::ResolvedReleased
                | AttemptEvent::ResolvedRejected
        )
    }

    /// Whether it is the answer to a duplicate that changed no record.
    pub fn is_answer(self) -> bool {
        matches!(
            self,
            AttemptEvent::Replayed
                | AttemptEvent::InProgress
                | AttemptEvent::Conflict
                | AttemptEvent::Rejected
        )
    }
}

impl fmt::Display for AttemptEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for AttemptEvent {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        AttemptEvent::ALL
            .into_iter()
            .find(|e| e.as_str() == s)
            .ok_or_else(|| format!("`{s}` is not an attempt event"))
    }
}

/// One entry of the attempt log.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct AttemptEntry {
    /// The entry's place in the log: increasing in the order entries were
    /// committed to one store (0 on an entry not yet written).
    pub id: u64,
    /// The record it is about.
    pub key: RecordKey,
    /// The fence it is about: the new fence of an execution, take-over or
    /// resolution; the holder's fence of an end or a refused write; the
    /// fence of the record a duplicate was answered about.
    pub fence: u64,
    /// What happened.
    pub event: AttemptEvent,
    /// Who: the run, trigger and attempt, host and pid of the caller (for an
    /// end, the holder of the fence). `None` when the store does not know
    /// (a refused write names only its fence; the entry that issued the
    /// fence names its holder).
    pub holder: Option<Holder>,
    /// When, by the store clock (ms since the epoch).
    pub at_ms: u64,
    /// The digest of the policy that derived the key, when known.
    pub policy_digest: Option<String>,
    /// The host's digest of the canonical business operation (independent
    /// of any policy and of the run), when the caller gave one: the same
    /// operation under two policy versions has one operation digest.
    pub operation_digest: Option<Digest>,
    /// Who resolved the record (a resolution only).
    pub actor: Option<String>,
    /// Free text: a resolution's reason, a refused write's explanation, a
    /// rejection's reason.
    pub detail: Option<String>,
}

impl AttemptEntry {
    /// An entry about `record` (its key, fence, holder and policy digest)
    /// at `at_ms`.
    pub(crate) fn of_record(record: &Record, event: AttemptEvent, at_ms: u64) -> Self {
        AttemptEntry {
            id: 0,
            key: record.key.clone(),
            fence: record.fence,
            event,
            holder: Some(record.holder.provenance()),
            at_ms,
            policy_digest: Some(record.policy_digest.clone()),
            operation_digest: None,
            actor: None,
            detail: None,
        }
    }

    /// An entry of `event` about `key` at `fence`, at `at_ms` (store clock),
    /// naming nothing else: no id yet, no holder, no digests, no actor, no
    /// detail. The fields are public, to be set after. (The struct is
    /// non-exhaustive: entries gain fields as the log learns more.)
    pub fn new(key: RecordKey, fence: u64, event: AttemptEvent, at_ms: u64) -> Self {
        AttemptEntry {
            id: 0,
            key,
            fence,
            event,
            holder: None,
            at_ms,
            policy_digest: None,
            operation_digest: None,
            actor: None,
            detail: None,
        }
    }

    /// An answer to a duplicate (see [`crate::Records::log_answers`]): about
    /// the record under `key` at `fence`, by `holder`, given at `at_ms` (the
    /// caller's reading of the store clock, [`crate::Store::clock`]).
    #[allow(clippy::too_many_arguments)]
    pub fn answer(
        key: RecordKey,
        fence: u64,
        event: AttemptEvent,
        holder: Holder,
        at_ms: u64,
        policy_digest: String,
        operation_digest: Option<Digest>,
        detail: Option<String>,
    ) -> Self {
        AttemptEntry {
            id: 0,
            key,
            fence,
            event,
            holder: Some(holder.provenance()),
            at_ms,
            policy_digest: Some(policy_digest),
            operation_digest,
            actor: None,
            detail: detail.map(bounded_note),
        }
    }
}

/// Which entries [`crate::Records::attempts`] returns, oldest first.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AttemptFilter {
    /// Only this namespace.
    pub namespace: Option<String>,
    /// Only this record (namespace and key).
    pub key: Option<RecordKey>,
    /// Only entries at or after this store-clock time (ms).
    pub since_ms: Option<u64>,
    /// Only entries before this store-clock time (ms).
    pub until_ms: Option<u64>,
    /// Only entries with a larger id (to page through a long log).
    pub after_id: Option<u64>,
    /// At most this many entries (all when `None`).
    pub limit: Option<u32>,
}

impl AttemptFilter {
    /// Whether `entry` is selected (the memory store's filter, and the
    /// reference the others are tested against).
    pub fn selects(&self, entry: &AttemptEntry) -> bool {
        self.namespace
            .as_ref()
            .is_none_or(|n| &entry.key.namespace == n)
            && self.key.as_ref().is_none_or(|k| &entry.key == k)
            && self.since_ms.is_none_or(|s| entry.at_ms >= s)
            && self.until_ms.is_none_or(|u| entry.at_ms < u)
            && self.after_id.is_none_or(|a| entry.id > a)
    }
}

/// How the detail of an amendment's log entry begins: `amends
/// resolved-rejected at fence 7: ` and then the person's reason (see
/// [`crate::Records::amend`]). Views read it to say a resolution was
/// amended.
pub const AMENDS: &str = "amends ";

/// How a person settles a record waiting for review.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Resolution {
    /// The effect did happen: the record becomes completed with this
    /// outcome, replayed to every later duplicate.
    Completed(Outcome),
    /// The effect did not happen (or may safely happen again): the record
    /// becomes failed-retryable, so the next claim re-executes under a
    /// higher fence where the policy re-executes a retryable failure.
    Release,
    /// Neither: the record becomes failed-permanent with this status (an
    /// exit code or an HTTP status) and the reason as its error, and later
    /// duplicates get the policy's answer to a permanent failure.
    Reject {
        /// The stored status.
        status: i32,
    },
}

impl Resolution {
    /// The log event of this resolution.
    pub fn event(&self) -> AttemptEvent {
        match self {
            Resolution::Completed(_) => AttemptEvent::ResolvedCompleted,
            Resolution::Release => AttemptEvent::ResolvedReleased,
            Resolution::Reject { .. } => AttemptEvent::ResolvedRejected,
        }
    }
}

/// A person's settlement of one record, for [`crate::Records::resolve`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolveRequest {
    /// The record.
    pub key: RecordKey,
    /// The fence the person saw (in `idem review`): the resolution is
    /// refused ([`crate::StoreError::Fenced`]) if the record moved on.
    pub observed_fence: u64,
    /// What to record.
    pub resolution: Resolution,
    /// Who decided (1 to 256 bytes, no control characters).
    pub by: String,
    /// Why (non-empty; cut to [`MAX_NOTE_BYTES`]).
    pub reason: String,
    /// The process writing the resolution (host and pid).
    pub holder: Holder,
}

/// The detail of a holder's end in the attempt log: a failure's error
/// text, cut to [`MAX_NOTE_BYTES`], so that the log says why an attempt
/// failed, not only that it did (`None` for a completion, or a failure
/// with no text).
pub(crate) fn end_note(state: RecordState, outcome: &Outcome) -> Option<String> {
    if state == RecordState::Completed {
        return None;
    }
    outcome
        .error
        .as_deref()
        .filter(|e| !e.is_empty())
        .map(|e| bounded_note(e.to_string()))
}

/// Text cut to [`MAX_NOTE_BYTES`] on a character boundary.
pub(crate) fn bounded_note(mut text: String) -> String {
    if text.len() > MAX_NOTE_BYTES {
        let mut end = MAX_NOTE_BYTES;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_event_reads_back_from_its_spelling() {
        for event in AttemptEvent::ALL {
            assert_eq!(event.as_str().parse::<AttemptEvent>(), Ok(event));
        }
        assert!("charged".parse::<AttemptEvent>().is_err());
    }

    #[test]
    fn notes_are_cut_on_a_char_boundary() {
        let cut = bounded_note("é".repeat(MAX_NOTE_BYTES));
        assert!(cut.len() <= MAX_NOTE_BYTES && cut.chars().all(|c| c == 'é'));
    }
}
