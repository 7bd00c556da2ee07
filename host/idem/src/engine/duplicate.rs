//! What a duplicate gets when the policy answers it without a new
//! attempt: the stored outcome replayed, or a refusal (a conflicting
//! operation under the key, an attempt still in progress, a rejection).
//! Each answer is logged; none changes the record.

use idem_core::{RecordState, Rejection};
use idem_store::{AttemptEvent, ClaimRequest, Existing, Record, RecordKey};

use super::{Begin, Engine, Replay};

impl Engine {
    /// The stored outcome, replayed.
    pub(super) fn replay(&self, request: &ClaimRequest, key: RecordKey, record: &Record) -> Begin {
        self.log_answer(request, record.fence, AttemptEvent::Replayed, None);
        Begin::Replay(Replay {
            key,
            state: record.state,
            outcome: record.outcome.clone().unwrap_or_default(),
            fence: record.fence,
        })
    }

    /// A refusal, named for what the duplicate met: another operation
    /// under the same key (a conflict), an attempt still in progress, or a
    /// record the policy will not run again.
    pub(super) fn refuse(
        &self,
        request: &ClaimRequest,
        key: RecordKey,
        existing: &Existing,
        r: Rejection,
    ) -> Begin {
        let record = &existing.view.record;
        let event = if !existing.fingerprint_matches {
            AttemptEvent::Conflict
        } else if record.state == RecordState::InProgress {
            AttemptEvent::InProgress
        } else {
            AttemptEvent::Rejected
        };
        self.log_answer(request, record.fence, event, Some(&r.reason));
        match event {
            AttemptEvent::Conflict => Begin::Conflict {
                key,
                status: r.status,
                reason: r.reason,
            },
            AttemptEvent::InProgress => Begin::InProgress {
                key,
                retry_after_ms: r.retry_after_ms,
                lease_remaining_ms: existing.view.lease_remaining_ms,
                reason: r.reason,
            },
            _ => Begin::Rejected {
                key,
                status: r.status,
                reason: r.reason,
                retry_after_ms: r.retry_after_ms,
                marked_unknown: false,
            },
        }
    }
}
