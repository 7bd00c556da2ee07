//! Problems as the sidecar answers them: RFC 9457 bodies, the same `type`
//! vocabulary as the HTTP layer's ([`idem_http::problem`]).

use axum::response::{IntoResponse, Response};
use http::StatusCode;
use idem::engine::EngineError;
use idem::store::StoreError;
pub(crate) use idem_http::problem::Problem;

/// A problem as a handler's error.
#[derive(Debug)]
pub(crate) struct ApiError(pub(crate) Problem);

impl From<Problem> for ApiError {
    fn from(p: Problem) -> Self {
        ApiError(p)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        self.0.into_response().map(axum::body::Body::new)
    }
}

/// A request that is not what the route takes (400), naming the member
/// when there is one.
pub(crate) fn invalid(member: Option<&str>, detail: impl Into<String>) -> ApiError {
    let problem = Problem::new(
        StatusCode::BAD_REQUEST,
        "invalid-request",
        "The request is not what this route takes",
        detail,
    );
    ApiError(match member {
        Some(m) => problem.with("member", m),
        None => problem,
    })
}

/// An engine error, as the client should read it: its fault (4xx) or
/// ours (5xx).
pub(crate) fn engine_error(e: EngineError) -> ApiError {
    match e {
        EngineError::Operation(e) => invalid(
            Some("operation"),
            format!("`operation` is not a valid operation: {e}"),
        ),
        EngineError::Refused(refusal) => {
            let problem = Problem::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "refused-by-policy",
                "The policy refused the operation",
                format!("the policy refused the operation: {}", refusal.message),
            )
            .with("code", refusal.code.as_str());
            ApiError(match refusal.field {
                Some(field) => problem.with("field", field),
                None => problem,
            })
        }
        EngineError::Policy(e) => {
            tracing::error!(error = %e, "the policy failed");
            ApiError(Problem::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "policy-failed",
                "The idempotency policy failed",
                e.to_string(),
            ))
        }
        EngineError::Fenced(e) | EngineError::Store(e) => store_error(e),
        // A policy whose digest is not registered for its namespace: the
        // operator's decision, not the caller's mistake; nothing written.
        EngineError::Unregistered(refusal) => ApiError(Problem::new(
            StatusCode::FORBIDDEN,
            "policy-not-registered",
            "The policy is not registered for its namespace",
            refusal.to_string(),
        )),
        // `EngineError` is non-exhaustive: an error this server does not
        // know is its own fault.
        e => {
            tracing::error!(error = %e, "the engine failed");
            ApiError(Problem::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "engine-failed",
                "The idempotency engine failed",
                e.to_string(),
            ))
        }
    }
}

/// A store error: the conflicts a client caused (a deposed fence, a final
/// record, no such record, a resolution the record does not allow) are
/// 4xx naming the fence or the state; anything else is the store's fault.
pub(crate) fn store_error(e: StoreError) -> ApiError {
    let problem = match &e {
        StoreError::Fenced {
            fence, current, ..
        } => Problem::new(
            StatusCode::CONFLICT,
            "stale-fence",
            "The fence is not the record's current fence",
            format!("fence {fence} is not the record's current fence {current} (its holder was deposed, or the fence is wrong): this write changed nothing"),
        )
        .with("fence", *fence)
        .with("current_fence", *current),
        StoreError::NotInProgress { fence, state, .. } => Problem::new(
            StatusCode::CONFLICT,
            "not-in-progress",
            "The record is no longer in progress",
            format!(
                "the record is {}, not in progress: fence {fence} can no longer write to it (a final record is never overwritten); this write changed nothing",
                state.as_str()
            ),
        )
        .with("fence", *fence)
        .with("state", state.as_str()),
        StoreError::Gone { key } => Problem::new(
            StatusCode::NOT_FOUND,
            "unknown-key",
            "No record has this key",
            format!("no record has the key {}: it never existed, or it expired", key.digest),
        )
        .with("key", key.digest.to_hex()),
        StoreError::NotEligible {
            state,
            why,
            action: "amended",
            ..
        } => Problem::new(
            StatusCode::CONFLICT,
            "not-amendable",
            "The record's resolution cannot be amended",
            format!(
                "the record is {} and its resolution cannot be amended ({why}); nothing changed",
                state.as_str()
            ),
        )
        .with("state", state.as_str()),
        StoreError::NotEligible { state, why, .. } => Problem::new(
            StatusCode::CONFLICT,
            "not-waiting-for-review",
            "The record is not waiting for review",
            format!("the record is {} and not waiting for review ({why}); nothing changed", state.as_str()),
        )
        .with("state", state.as_str()),
        StoreError::OutcomeTooLarge { size, limit, .. } => Problem::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "outcome-too-large",
            "The outcome is larger than the store keeps",
            format!("the outcome's body is {size} bytes, more than the store's limit of {limit} bytes; nothing was written"),
        )
        .with("limit_bytes", *limit as u64),
        StoreError::InvalidRequest(why) => Problem::new(
            StatusCode::BAD_REQUEST,
            "invalid-request",
            "The request is not what this route takes",
            why.clone(),
        ),
        _ => {
            tracing::error!(error = %e, "the store failed");
            Problem::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "store-unavailable",
                "The idempotency store is unavailable",
                format!("the idempotency store failed: {e}"),
            )
            .retry_after_ms(1000)
        }
    };
    ApiError(problem)
}
