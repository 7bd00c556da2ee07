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
        let read = tokio::time::timeout(app.body_timeout, read_bounded(request, app.body_limit));
        let mut stopping = app.stopping.clone();
        // A body still arriving when the sidecar starts to stop has reached
        // nothing: it is answered at once (the client tries again, at this
        // sidecar's successor), rather than holding the drain open, or
        // being cut at its deadline, for a client that may never finish it.
        let bytes = tokio::select! {
            biased;
            read = read => read.map_err(|_| body_timed_out(app.body_timeout))??,
            () = stopped(&mut stopping) => return Err(stopping_problem()),
        };
        parse(&bytes).map(Api)
    }
}

/// Resolves once the sidecar starts to stop (never, if nothing will tell).
pub(crate) async fn stopped(stopping: &mut tokio::sync::watch::Receiver<bool>) {
    if stopping.wait_for(|s| *s).await.is_err() {
        std::future::pending::<()>().await;
    }
}

fn stopping_problem() -> ApiError {
    ApiError(
        Problem::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "stopping",
            "The sidecar is stopping",
            "the sidecar started to stop while this request's body was still arriving: nothing was done; send it again",
        )
        .retry_after_ms(1000),
    )
}

/// Refuses a body that is not labelled JSON: `application/json` (with
/// parameters) or a `+json` type (`application/merge-patch+json`). A body
/// without a `Content-Type`, or labelled as text or a form (what curl's
/// `-d` and Python's urllib send unless told otherwise: the detail says
/// what to send), is refused too: those are what a page on another site
/// may make a browser send without asking, and a JSON label is not.
fn media_type(headers: &http::HeaderMap) -> Result<(), ApiError> {
    let text = match headers.get(header::CONTENT_TYPE) {
        Some(value) => value.to_str().unwrap_or(""),
        None => {
            return Err(unsupported(
                "the request has no Content-Type; send `Content-Type: application/json`".into(),
            ));
        }
    };
    let essence = text.split(';').next().unwrap_or("").trim();
    let json = essence.split_once('/').is_some_and(|(kind, subtype)| {
        let subtype = subtype.to_ascii_lowercase();
        kind.eq_ignore_ascii_case("application")
            && (subtype == "json" || (subtype.len() > 5 && subtype.ends_with("+json")))
    });
    if json {
        return Ok(());
    }
    Err(unsupported(format!(
        "the request's Content-Type is `{}`; send `application/json`",
        idem::core::text::escaped(text)
            .chars()
            .take(100)
            .collect::<String>()
    )))
}

fn unsupported(detail: String) -> ApiError {
    ApiError(Problem::new(
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "unsupported-media-type",
        "The request body must be JSON",
        detail,
    ))
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
    use super::{media_type, parse};
    use crate::api::{CompleteRequest, ResolveRequest};

    #[test]
    fn only_a_body_labelled_json_is_read() {
        let status = |label: Option<&str>| {
            let mut headers = http::HeaderMap::new();
            if let Some(l) = label {
                headers.insert(http::header::CONTENT_TYPE, l.parse().unwrap());
            }
            media_type(&headers).map_or_else(|e| e.0.status.as_u16(), |()| 200)
        };
        for ok in [
            "application/json",
            "application/json; charset=utf-8",
            "Application/JSON",
            "application/merge-patch+json",
            "application/problem+json;v=1",
        ] {
            assert_eq!(status(Some(ok)), 200, "{ok}");
        }
        for refused in [
            None,
            Some("text/plain"),
            Some("text/plain; charset=utf-8"),
            Some("application/x-www-form-urlencoded"),
            Some("multipart/form-data; boundary=x"),
            Some("application/+json"),
            Some("text/json"),
            Some("application/jsonp"),
            Some(""),
        ] {
            assert_eq!(status(refused), 415, "{refused:?}");
        }
    }

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
