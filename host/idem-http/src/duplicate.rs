//! What a request gets when its handler does not run: the engine found the
//! key's record, and the policy decided. A replay of the stored response,
//! or a refusal as a problem: in flight (with a `Retry-After` the client
//! can use), the key reused for another request, or rejected (sent to
//! review, or waiting there).

use std::time::Duration;

use http::{Response, StatusCode};
use idem::engine::{Begin, Replay};
use idem::store::RecordState;

use crate::config::Config;
use crate::problem::Problem;
use crate::response_body::{ResponseBody, full};
use crate::stored;

/// The answer to a duplicate (any answer of `begin` but
/// [`Begin::Execute`], which runs the handler), and whether it is a replay
/// of the stored response.
pub(crate) fn answer(config: &Config, begin: Begin) -> (Response<ResponseBody>, bool) {
    let problem = match begin {
        Begin::Execute(_) => unreachable!("an execution runs the handler"),
        Begin::Replay(replay) => return (replay_response(&replay), true),
        Begin::InProgress {
            retry_after_ms,
            lease_remaining_ms,
            reason,
            ..
        } => Problem::new(
            StatusCode::CONFLICT,
            "request-in-flight",
            "A request with this Idempotency-Key is still being processed",
            reason,
        )
        .retry_after_ms(in_flight_retry_after_ms(
            retry_after_ms,
            lease_remaining_ms,
            config.in_flight_retry_after,
        )),
        Begin::Conflict { status, reason, .. } => Problem::new(
            policy_status(status),
            "key-reused",
            "The Idempotency-Key was used for a different request",
            reason,
        ),
        Begin::Rejected {
            status,
            reason,
            retry_after_ms,
            marked_unknown,
            ..
        } => {
            let problem = if marked_unknown {
                Problem::new(
                    policy_status(status),
                    "needs-review",
                    "An earlier attempt's outcome is unknown and needs review",
                    reason,
                )
            } else {
                Problem::new(
                    policy_status(status),
                    "rejected",
                    "The policy rejected this duplicate request",
                    reason,
                )
            };
            match retry_after_ms {
                Some(ms) => problem.retry_after_ms(ms),
                None => problem,
            }
        }
        // `Begin` is non-exhaustive: an answer of a later engine that this
        // layer does not know runs nothing.
        other => {
            tracing::error!(answer = ?other, "an answer of the engine this layer does not know");
            Problem::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "unknown-answer",
                "The idempotency engine gave an answer this layer does not know",
                "nothing was run for this request",
            )
        }
    };
    (problem.into_response(), false)
}

/// How long a client is told to wait before retrying a key whose first
/// request is in flight, in milliseconds (the problem rounds it up to whole
/// seconds, at least one): the policy's `hint` when it is shorter than what
/// is left of the first request's lease, else the layer's `configured`
/// wait; never past the lease, by when the first request has ended or the
/// next retry is the policy's to decide.
///
/// A hint of the whole lease, or more, says no more than the lease does:
/// `Decision::standard` and the shipped policies give exactly what is left
/// of it, which for a 0.2 s request is a minute of waiting.
pub(crate) fn in_flight_retry_after_ms(
    hint: Option<u64>,
    lease_remaining_ms: u64,
    configured: Duration,
) -> u64 {
    let wanted = match hint {
        Some(ms) if ms < lease_remaining_ms => ms,
        _ => u64::try_from(configured.as_millis()).unwrap_or(u64::MAX),
    };
    wanted.min(lease_remaining_ms)
}

/// A stored response, replayed. An empty outcome is a settlement that
/// stored no response (the layer always stores its marker): its status,
/// with no body, or, rejected for good, with a problem saying so.
fn replay_response(replay: &Replay) -> Response<ResponseBody> {
    let status = u16::try_from(replay.outcome.status)
        .ok()
        .and_then(|s| StatusCode::from_u16(s).ok());
    if let (Some(status), true) = (status, replay.outcome.body.is_empty()) {
        return settled_without_a_response(status, replay.state);
    }
    let decoded = stored::decode(&replay.outcome.body);
    let (Some(status), Ok((headers, body))) = (status, decoded) else {
        let why = match stored::decode(&replay.outcome.body) {
            Err(stored::NotAResponse(why)) => why,
            Ok(_) => "its status is not an HTTP status",
        };
        return Problem::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "stored-outcome-unreadable",
            "The stored response cannot be replayed",
            format!("the outcome stored under this key is not a response this layer stored: {why}"),
        )
        .into_response();
    };
    stored::replayed(status, headers, body)
}

/// The replay of a record settled with no response: `Resolution::Reject`
/// (its status, failed for good) or a completion with an empty body.
fn settled_without_a_response(status: StatusCode, state: RecordState) -> Response<ResponseBody> {
    if state == RecordState::FailedPermanent {
        return Problem::new(
            status,
            "rejected-for-good",
            "The request was rejected for good",
            "an earlier attempt under this key ended without a response to replay (a settlement that rejected it stores none): it was rejected for good, and will not run again",
        )
        .into_response();
    }
    let mut response = Response::new(full(bytes::Bytes::new()));
    *response.status_mut() = status;
    response
}

/// The policy's status for a refusal (the engine's safety gate keeps it in
/// 400..=599).
fn policy_status(status: i32) -> StatusCode {
    u16::try_from(status)
        .ok()
        .and_then(|status| StatusCode::from_u16(status).ok())
        .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
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
    fn a_hint_of_the_whole_lease_or_none_gives_the_layers_wait() {
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
