//! The request body: read once, bounded, parsed as exactly the JSON object
//! the route takes. Every refusal names what was wrong: the size, the
//! media type, where the JSON breaks, or which member is unknown, missing
//! or of the wrong type.

use std::sync::Arc;

use axum::extract::{FromRequest, Request};
use bytes::Bytes;
use http::{StatusCode, header};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use serde::de::DeserializeOwned;

use crate::App;
use crate::problem::{ApiError, Problem, invalid};

/// A route's request, parsed.
pub(crate) struct Api<T>(pub(crate) T);

impl<T: DeserializeOwned> FromRequest<Arc<App>> for Api<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, app: &Arc<App>) -> Result<Self, ApiError> {
        media_type(request.headers())?;
        let bytes = tokio::time::timeout(app.body_timeout, read_bounded(request, app.body_limit))
            .await
            .map_err(|_| body_timed_out(app.body_timeout))??;
        parse(&bytes).map(Api)
    }
}

/// Refuses a body that says it is something other than JSON (curl's `-d`
/// and Python's urllib label a body as a form unless told otherwise: the
/// detail says what to send). A body without a `Content-Type` is taken as
/// JSON.
fn media_type(headers: &http::HeaderMap) -> Result<(), ApiError> {
    let Some(value) = headers.get(header::CONTENT_TYPE) else {
        return Ok(());
    };
    let text = value.to_str().unwrap_or("");
    let essence = text.split(';').next().unwrap_or("").trim();
    if essence.eq_ignore_ascii_case("application/json") {
        return Ok(());
    }
    Err(ApiError(Problem::new(
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "unsupported-media-type",
        "The request body must be JSON",
        format!(
            "the request's Content-Type is `{}`; send `application/json`",
            text.chars().take(100).collect::<String>()
        ),
    )))
}

/// The whole body, refused with 413 as soon as it passes `limit` bytes (at
/// once when `Content-Length` says it will).
async fn read_bounded(request: Request, limit: usize) -> Result<Bytes, ApiError> {
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(too_large(limit));
    }
    match Limited::new(request.into_body(), limit).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.is::<LengthLimitError>() => Err(too_large(limit)),
        Err(e) => Err(ApiError(Problem::new(
            StatusCode::BAD_REQUEST,
            "unreadable-body",
            "The request body could not be read",
            format!("reading the request body failed: {e}"),
        ))),
    }
}

/// A body that did not arrive in time: the client stalled (or is too slow
/// to be served without holding a connection for everyone else).
fn body_timed_out(limit: std::time::Duration) -> ApiError {
    ApiError(Problem::new(
        StatusCode::REQUEST_TIMEOUT,
        "body-timeout",
        "The request body did not arrive in time",
        format!(
            "the request body did not arrive within {} ms (--body-timeout); nothing was done",
            limit.as_millis()
        ),
    ))
}

fn too_large(limit: usize) -> ApiError {
    ApiError(
        Problem::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body-too-large",
            "The request body is too large",
            format!("the request body is larger than the limit of {limit} bytes"),
        )
        .with("limit_bytes", limit as u64),
    )
}

/// The body as `T`: a malformed document names where it breaks; a
/// member of the wrong type is named by its path; a missing or unknown
/// member is named by serde (every request type denies unknown members).
/// A member name repeated anywhere is refused, naming it. The syntax is
/// checked first, on its own: serde_json reports some
/// type mismatches (a number where an enum goes) as syntax errors when it
/// reads text and the type at once.
pub(crate) fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(malformed(
            "the request body is empty: send a JSON object".into(),
        ));
    }
    let mut value: serde_json::Value = serde_json::from_slice(bytes)
        .map_err(|e| malformed(format!("the request body is not valid JSON: {e}")))?;
    idem::core::json::unique_members(bytes).map_err(|e| {
        invalid(
            Some(&e.path),
            format!(
                "{e}: send each member once (a reader that keeps the first would see another request than idem, which would keep the last)"
            ),
        )
    })?;
    integral_numbers(&mut value);
    serde_path_to_error::deserialize::<_, T>(value).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if path == "." {
            invalid(
                None,
                format!("the request body does not fit this route: {inner}"),
            )
        } else {
            invalid(Some(&path), format!("`{path}`: {inner}"))
        }
    })
}

/// A number in the request written with a zero fraction or an exponent
/// (`7.0`, `7e0`) is the integer it equals, as JSON Schema's `integer`
/// says: `fence: 7.0` is fence 7, `now_ms: 651.0` is 651. Everywhere but
/// an operation's `fields`, whose numbers reach the policy in their
/// canonical spelling anyway.
fn integral_numbers(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::Object(members) => {
            for (name, member) in members.iter_mut() {
                if name != "fields" {
                    integral_numbers(member);
                }
            }
        }
        serde_json::Value::Number(n) => {
            if let Ok(canonical) = idem::core::number::canonical_number(&n.to_string())
                && !canonical.contains('.')
                && let Ok(integer) = canonical.parse::<serde_json::Number>()
            {
                *n = integer;
            }
        }
        _ => {}
    }
}

fn malformed(detail: String) -> ApiError {
    ApiError(Problem::new(
        StatusCode::BAD_REQUEST,
        "malformed-json",
        "The request body is not valid JSON",
        detail,
    ))
}

#[cfg(test)]
mod tests {
    use super::parse;
    use crate::api::{CompleteRequest, ResolveRequest};

    /// The problem's slug, member and detail for a body.
    fn refusal<T: serde::de::DeserializeOwned>(body: &str) -> (String, Option<String>, String) {
        let Err(e) = parse::<T>(body.as_bytes()) else {
            panic!("{body} was accepted")
        };
        let p = e.0.to_json();
        (
            p["type"]
                .as_str()
                .unwrap()
                .rsplit('/')
                .next()
                .unwrap()
                .into(),
            p.get("member").and_then(|m| m.as_str()).map(String::from),
            p["detail"].as_str().unwrap().into(),
        )
    }

    #[test]
    fn each_bad_body_is_named() {
        let (slug, _, detail) = refusal::<CompleteRequest>("  ");
        assert_eq!(slug, "malformed-json");
        assert!(detail.contains("empty"), "{detail}");
        let (slug, _, detail) = refusal::<CompleteRequest>(r#"{"key":"#);
        assert_eq!(slug, "malformed-json");
        assert!(detail.contains("not valid JSON"), "{detail}");
        let (slug, member, detail) = refusal::<CompleteRequest>(r#"{"key":"k","fence":"7"}"#);
        assert_eq!(
            (slug.as_str(), member.as_deref()),
            ("invalid-request", Some("fence"))
        );
        assert!(detail.starts_with("`fence`: invalid type"), "{detail}");
        let (_, _, detail) = refusal::<CompleteRequest>(r#"{"key":"k"}"#);
        assert!(detail.contains("missing field `fence`"), "{detail}");
        let (_, member, detail) = refusal::<CompleteRequest>(r#"{"key":"k","fence":1,"bdy":"x"}"#);
        assert_eq!(member.as_deref(), Some("bdy"));
        assert!(detail.contains("unknown field `bdy`"), "{detail}");
        // A number where an enum goes is a type error, not a syntax error.
        let (slug, member, _) = refusal::<ResolveRequest>(
            r#"{"key":"k","fence":1,"resolution":-7,"reason":"r","by":"b"}"#,
        );
        assert_eq!(
            (slug.as_str(), member.as_deref()),
            ("invalid-request", Some("resolution"))
        );
    }

    #[test]
    fn a_repeated_member_is_refused_at_any_depth() {
        use crate::api::OperationRequest;
        let (slug, member, detail) = refusal::<OperationRequest>(
            r#"{"operation":{"kind":"charge","tenant":"t","fields":{"invoice_id":"d1","invoice_id":"d2"}}}"#,
        );
        assert_eq!(
            (slug.as_str(), member.as_deref()),
            ("invalid-request", Some("operation.fields.invoice_id"))
        );
        assert!(detail.contains("appears twice"), "{detail}");
        let (_, member, _) =
            refusal::<OperationRequest>(r#"{"operation":{"kind":"a"},"operation":{"kind":"b"}}"#);
        assert_eq!(member.as_deref(), Some("operation"));
        let (_, member, _) = refusal::<CompleteRequest>(r#"{"key":"k","fence":1,"fence":2}"#);
        assert_eq!(member.as_deref(), Some("fence"));
    }

    #[test]
    fn an_integral_number_is_the_integer() {
        for spelling in ["7", "7.0", "7.000", "7e0", "0.7e1", "700e-2"] {
            let body = format!(r#"{{"key":"k","fence":{spelling}}}"#);
            let r: CompleteRequest = parse(body.as_bytes()).unwrap();
            assert_eq!(r.fence, 7, "{spelling}");
        }
        let (_, member, _) = refusal::<CompleteRequest>(r#"{"key":"k","fence":7.5}"#);
        assert_eq!(member.as_deref(), Some("fence"));
    }

    #[test]
    fn a_good_body_parses() {
        let r: CompleteRequest = parse(br#"{"key":"k","fence":7,"body":"receipt"}"#).unwrap();
        assert_eq!(
            (r.fence, r.status, r.body.as_deref()),
            (7, 0, Some("receipt"))
        );
    }
}
