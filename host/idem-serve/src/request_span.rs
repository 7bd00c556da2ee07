//! A span per request, named and described by OpenTelemetry's HTTP server
//! conventions (`POST /v1/begin`, `http.request.method`, `http.route`,
//! `http.response.status_code`), around everything the request does: the
//! engine's derive, claim and finish spans are its children. With the
//! `otel` feature, a W3C `traceparent` header (and `tracestate`) makes the
//! request a child of the caller's span, so a client's trace continues
//! through the sidecar into the store.
//!
//! The path and the user agent are a caller's text: each is cut to
//! [`MAX_TEXT`] bytes before it becomes an attribute.

use axum::extract::Request;
use axum::http::Method;
use axum::middleware::Next;
use axum::response::Response;
use tracing::Instrument;

/// The longest text from a request kept as an attribute, in bytes.
pub(crate) const MAX_TEXT: usize = 256;

/// The middleware: runs the request inside its span, and records the
/// status it was answered.
pub(crate) async fn trace(request: Request, next: Next) -> Response {
    // A caller may send any token as a method: the conventions' `_OTHER`
    // for those outside HTTP's own, so a span name stays short and known.
    let method = match *request.method() {
        Method::GET
        | Method::HEAD
        | Method::POST
        | Method::PUT
        | Method::DELETE
        | Method::CONNECT
        | Method::OPTIONS
        | Method::TRACE
        | Method::PATCH => request.method().as_str().to_owned(),
        _ => "_OTHER".to_owned(),
    };
    let path = request.uri().path();
    // A route is the template; only a known one is a route (an unknown
    // path is a caller's text, kept bounded as `url.path`).
    let route = crate::ROUTES
        .iter()
        .map(|(_, route)| *route)
        .chain([
            "/metrics",
            "/console",
            "/console/login",
            "/console/logout",
            "/console/resolve",
        ])
        .find(|route| *route == path)
        .or_else(|| {
            path.starts_with("/console/record/")
                .then_some("/console/record/{key}")
        });
    let name = match route {
        Some(route) => format!("{method} {route}"),
        None => method.clone(),
    };
    let agent = request
        .headers()
        .get(http::header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .map(|v| bounded(v).to_owned());
    let span = tracing::info_span!(
        "idem.request",
        otel.name = %name,
        otel.kind = "server",
        http.request.method = %method,
        http.route = route,
        url.path = bounded(path),
        user_agent.original = agent,
        http.response.status_code = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
    );
    #[cfg(feature = "otel")]
    continue_caller_trace(&span, request.headers());
    let response = next.run(request).instrument(span.clone()).await;
    let status = response.status();
    span.record("http.response.status_code", status.as_u16());
    // A server's span is an error for 5xx only: a 4xx is the caller's.
    if status.is_server_error() {
        span.record("otel.status_code", "ERROR");
    }
    response
}

/// `text` cut to at most [`MAX_TEXT`] bytes, at a character boundary.
pub(crate) fn bounded(text: &str) -> &str {
    if text.len() <= MAX_TEXT {
        return text;
    }
    let mut end = MAX_TEXT;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// Makes `span` a child of the caller's span named by the request's W3C
/// trace context, if it sent one (a malformed header is ignored).
#[cfg(feature = "otel")]
fn continue_caller_trace(span: &tracing::Span, headers: &http::HeaderMap) {
    use opentelemetry::trace::TraceContextExt as _;
    use tracing_opentelemetry::OpenTelemetrySpanExt as _;
    let parent = opentelemetry::global::get_text_map_propagator(|propagator| {
        propagator.extract(&opentelemetry_http::HeaderExtractor(headers))
    });
    if parent.span().span_context().is_valid() {
        // Refused only when the span is not recorded by an OpenTelemetry
        // layer (no export configured): nothing to continue then.
        let _ = span.set_parent(parent);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caller_text_is_cut_at_a_character_boundary() {
        assert_eq!(bounded("/v1/begin"), "/v1/begin");
        let long = "é".repeat(MAX_TEXT);
        let cut = bounded(&long);
        assert!(cut.len() <= MAX_TEXT && cut.len() >= MAX_TEXT - 1);
        assert!(cut.chars().all(|c| c == 'é'));
    }
}
