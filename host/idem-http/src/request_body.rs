//! The request body, read once and bounded.

use bytes::Bytes;
use http::{HeaderMap, StatusCode, header};
use http_body::Body;
use http_body_util::{BodyExt, LengthLimitError, Limited};

use crate::problem::Problem;

/// Reads `body` whole, refusing it with 413 as soon as it passes `limit`
/// bytes (at once when `Content-Length` says it will).
pub(crate) async fn read_bounded<B>(
    headers: &HeaderMap,
    body: B,
    limit: usize,
) -> Result<Bytes, Problem>
where
    B: Body,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(too_large(limit));
    }
    match Limited::new(body, limit).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.is::<LengthLimitError>() => Err(too_large(limit)),
        Err(e) => Err(Problem::new(
            StatusCode::BAD_REQUEST,
            "unreadable-body",
            "The request body could not be read",
            format!("reading the request body failed: {e}"),
        )),
    }
}

fn too_large(limit: usize) -> Problem {
    Problem::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "body-too-large",
        "The request body is too large",
        format!("the request body is larger than the limit of {limit} bytes"),
    )
    .with("limit_bytes", limit as u64)
}
