//! What a request gets when its handler does not run: the engine found the
//! key's record, and the policy decided. A replay of the stored response,
//! or a refusal as a problem: in flight (with a `Retry-After` the client
//! can use), the key reused for another request, or rejected (sent to
//! review, or waiting there).

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
        .retry_after_ms(idem::engine::in_flight_retry_after_ms(
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
