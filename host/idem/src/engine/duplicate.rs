//! What a duplicate gets when the policy answers it without a new
//! attempt: the stored outcome replayed, or a refusal (a conflicting
//! operation under the key, an attempt still in progress, a rejection).
//! Each answer is logged; none changes the record.

use std::time::Duration;

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

/// How long a caller answered [`Begin::InProgress`] should wait before
/// trying again, in milliseconds: the policy's `hint` when it is shorter
/// than what is left of the holder's lease, else the face's own `wait`
/// (about how long the effect usually takes); never past the lease, by
/// when the holder has ended or the next duplicate is the policy's to
/// decide.
///
/// A hint of the whole lease, or more, says no more than the lease does:
/// `Decision::standard` and the shipped policies give exactly what is left
/// of it, which for a 0.2 s request would be a minute of waiting. The HTTP
/// layer's `Retry-After`, the sidecar's `retry_after_ms` and `idem exec`'s
/// advice all come from here.
pub fn in_flight_retry_after_ms(hint: Option<u64>, lease_remaining_ms: u64, wait: Duration) -> u64 {
    let wanted = match hint {
        Some(ms) if ms < lease_remaining_ms => ms,
        _ => u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
    };
    wanted.min(lease_remaining_ms)
}

impl Begin {
    /// For [`Begin::InProgress`], [`in_flight_retry_after_ms`] of its hint
    /// and lease with the caller's `wait`; `None` for any other answer.
    pub fn in_flight_retry_after_ms(&self, wait: Duration) -> Option<u64> {
        match self {
            Begin::InProgress {
                retry_after_ms,
                lease_remaining_ms,
                ..
            } => Some(in_flight_retry_after_ms(
                *retry_after_ms,
                *lease_remaining_ms,
                wait,
            )),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::in_flight_retry_after_ms;
    use std::time::Duration;

    const SECOND: Duration = Duration::from_secs(1);

    #[test]
    fn a_policy_hint_shorter_than_the_lease_is_taken() {
        assert_eq!(in_flight_retry_after_ms(Some(2_500), 40_000, SECOND), 2_500);
        assert_eq!(in_flight_retry_after_ms(Some(0), 40_000, SECOND), 0);
    }

    #[test]
    fn a_hint_of_the_whole_lease_or_none_gives_the_faces_wait() {
        assert_eq!(
            in_flight_retry_after_ms(Some(40_000), 40_000, SECOND),
            1_000
        );
        assert_eq!(
            in_flight_retry_after_ms(Some(90_000), 40_000, SECOND),
            1_000
        );
        assert_eq!(in_flight_retry_after_ms(None, 40_000, 5 * SECOND), 5_000);
    }

    #[test]
    fn never_past_the_lease_that_is_left() {
        assert_eq!(in_flight_retry_after_ms(None, 3_000, 10 * SECOND), 3_000);
        assert_eq!(in_flight_retry_after_ms(Some(40_000), 300, SECOND), 300);
        assert_eq!(in_flight_retry_after_ms(None, 0, SECOND), 0);
    }
}
