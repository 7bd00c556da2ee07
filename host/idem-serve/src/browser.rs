//! What a web page could make a browser send to the sidecar, refused
//! before any route runs.
//!
//! Without a token the sidecar listens on loopback only, but a browser on
//! the same machine reaches loopback too, on behalf of any page it shows:
//!
//! - **DNS rebinding.** A page on `evil.example` has its name resolve to
//!   127.0.0.1 and then calls "its own" origin, which is the sidecar: the
//!   browser's same-origin rule is satisfied, and the answers can be read.
//!   The request still names `evil.example` in its `Host` header: without a
//!   token, a `Host` that is not a loopback name or address with the
//!   listener's port, nor a name given with `--allow-host`, is refused
//!   (`421`). With a token the page cannot authenticate, so `Host` is
//!   checked only when `--allow-host` names the names to accept.
//! - **Cross-site requests.** A page may make a browser `POST` anywhere
//!   without asking, as long as the body is a form or text: every
//!   state-changing request whose `Origin` is not the sidecar's own (its
//!   `Host`, or a name given with `--allow-host`) is refused (`403`). A
//!   request with no `Origin` is from a client that is not a browser (or a
//!   same-origin navigation of an old one) and is served. The API's
//!   bodies must be JSON besides (the `json` module: `415`), which no page
//!   can send elsewhere without the browser asking first.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http::uri::Authority;
use http::{Method, StatusCode, header};

use crate::problem::{ApiError, Problem};

/// The names a request may call the sidecar by, and whether `Host` is
/// checked at all.
#[derive(Debug, Clone)]
pub(crate) struct Guard {
    /// The listener's address: a `Host` naming it (or, on a loopback
    /// listener, `localhost` or any loopback address) with its port is the
    /// sidecar's own.
    local: SocketAddr,
    /// Whether `Host` is checked (no token, or names were given).
    check_host: bool,
    /// `--allow-host`: names (any port) or `name:port`, in lower case.
    allowed: Vec<String>,
}

impl Guard {
    /// The guard of a sidecar listening on `local`, with or without a
    /// token, accepting the names in `allowed` besides its own.
    pub(crate) fn new(local: SocketAddr, token: bool, allowed: &[String]) -> Self {
        Guard {
            local,
            check_host: !token || !allowed.is_empty(),
            allowed: allowed.iter().map(|a| a.to_ascii_lowercase()).collect(),
        }
    }

    /// Whether `authority` (a `Host` header, or an origin's host and port)
    /// is a name the sidecar answers to.
    fn known(&self, authority: &Authority) -> bool {
        let host = authority.host().to_ascii_lowercase();
        let port = authority.port_u16();
        let named = |a: &String| match a.rsplit_once(':') {
            Some((name, p)) if !a.ends_with(']') => {
                name == host && p.parse::<u16>().ok() == Some(port.unwrap_or(80))
            }
            _ => *a == host,
        };
        if self.allowed.iter().any(named) {
            return true;
        }
        if port.unwrap_or(80) != self.local.port() {
            return false;
        }
        let ip = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<IpAddr>()
            .ok();
        let local = self.local.ip();
        match ip {
            // An address cannot be rebound: the listener's own, any
            // loopback address on a loopback listener, and any address on
            // one listening on all of them.
            Some(ip) => {
                ip == local || local.is_unspecified() || (ip.is_loopback() && local.is_loopback())
            }
            // `localhost` never leaves the machine (browsers resolve it
            // themselves, RFC 6761).
            None => host == "localhost" && (local.is_loopback() || local.is_unspecified()),
        }
    }

    /// Why `request` is refused, if it is.
    fn refusal(&self, request: &Request) -> Option<Problem> {
        let headers = request.headers();
        let host = headers.get(header::HOST);
        let host_authority = host
            .and_then(|h| h.to_str().ok())
            .and_then(|h| h.parse::<Authority>().ok())
            .filter(|a| !a.as_str().contains('@'));
        if self.check_host && !host_authority.as_ref().is_some_and(|a| self.known(a)) {
            let shown = host.map_or("(none)".into(), |h| {
                idem::core::text::escaped(&String::from_utf8_lossy(h.as_bytes()))
                    .chars()
                    .take(100)
                    .collect::<String>()
            });
            return Some(Problem::new(
                StatusCode::MISDIRECTED_REQUEST,
                "unknown-host",
                "The request names another host",
                format!(
                    "the request's Host is `{shown}`, not a name this sidecar answers to ({}, or a name given with --allow-host): a page whose name was made to point at this machine (DNS rebinding) is refused",
                    self.own_names()
                ),
            ));
        }
        if matches!(
            *request.method(),
            Method::GET | Method::HEAD | Method::OPTIONS
        ) {
            return None;
        }
        let origin = headers.get(header::ORIGIN)?;
        let text = origin.to_str().unwrap_or("");
        let same = text
            .parse::<http::Uri>()
            .ok()
            .filter(|u| matches!(u.scheme_str(), Some("http" | "https")) && u.path() == "/")
            .and_then(|u| u.authority().cloned())
            .is_some_and(|a| {
                host_authority
                    .as_ref()
                    .is_some_and(|h| same_authority(&a, h))
                    || (!self.allowed.is_empty() && self.known(&a))
            });
        if same {
            return None;
        }
        let shown: String = idem::core::text::escaped(text).chars().take(100).collect();
        Some(Problem::new(
            StatusCode::FORBIDDEN,
            "cross-origin-request",
            "The request comes from another site",
            format!(
                "the request's Origin is `{shown}`, not this sidecar's own: a page on another site may not call it through a browser (clients that are not browsers send no Origin)"
            ),
        ))
    }

    fn own_names(&self) -> String {
        let port = self.local.port();
        if self.local.ip().is_loopback() {
            format!("localhost:{port} or a loopback address with port {port}")
        } else if self.local.ip().is_unspecified() {
            format!("localhost:{port} or an address with port {port}")
        } else {
            self.local.to_string()
        }
    }
}

/// Whether an origin's authority is the `Host` (the same name, and the
/// same port once a missing one is read as 80 or 443).
fn same_authority(origin: &Authority, host: &Authority) -> bool {
    let defaults = [None, Some(80), Some(443)];
    origin.host().eq_ignore_ascii_case(host.host())
        && (origin.port_u16() == host.port_u16()
            || (defaults.contains(&origin.port_u16()) && defaults.contains(&host.port_u16())))
}

/// The middleware: a request a browser was made to send is refused before
/// anything else reads it.
pub(crate) async fn check(
    State(guard): State<Arc<Guard>>,
    request: Request,
    next: Next,
) -> Response {
    match guard.refusal(&request) {
        None => next.run(request).await,
        Some(problem) => ApiError(problem).into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(method: &str, host: Option<&str>, origin: Option<&str>) -> Request {
        let mut r = http::Request::builder().method(method).uri("/v1/begin");
        if let Some(h) = host {
            r = r.header(header::HOST, h);
        }
        if let Some(o) = origin {
            r = r.header(header::ORIGIN, o);
        }
        r.body(axum::body::Body::empty()).unwrap()
    }

    fn status(guard: &Guard, method: &str, host: Option<&str>, origin: Option<&str>) -> u16 {
        guard
            .refusal(&request(method, host, origin))
            .map_or(200, |p| p.status.as_u16())
    }

    #[test]
    fn without_a_token_only_loopback_names_and_allowed_ones_pass() {
        let guard = Guard::new(
            "127.0.0.1:7676".parse().unwrap(),
            false,
            &["idem.internal".into()],
        );
        for host in [
            "127.0.0.1:7676",
            "localhost:7676",
            "LocalHost:7676",
            "[::1]:7676",
            "127.0.0.2:7676",
            "idem.internal",
            "idem.internal:9",
        ] {
            assert_eq!(status(&guard, "POST", Some(host), None), 200, "{host}");
        }
        for host in [
            "evil.example:7676",
            "evil.example",
            "127.0.0.1:7677",
            "127.0.0.1",
            "10.0.0.1:7676",
            "localhost.evil.example:7676",
            "u@127.0.0.1:7676",
            "bad host",
        ] {
            assert_eq!(status(&guard, "POST", Some(host), None), 421, "{host}");
        }
        assert_eq!(status(&guard, "GET", None, None), 421);
        let named_port = Guard::new(
            "127.0.0.1:7676".parse().unwrap(),
            false,
            &["idem.internal:8443".into()],
        );
        assert_eq!(
            status(&named_port, "POST", Some("idem.internal:8443"), None),
            200
        );
        assert_eq!(
            status(&named_port, "POST", Some("idem.internal:8444"), None),
            421
        );
    }

    #[test]
    fn with_a_token_host_is_checked_only_when_names_are_given() {
        let open = Guard::new("0.0.0.0:7676".parse().unwrap(), true, &[]);
        assert_eq!(status(&open, "POST", Some("anything.example"), None), 200);
        let named = Guard::new(
            "0.0.0.0:7676".parse().unwrap(),
            true,
            &["idem.example.com".into()],
        );
        assert_eq!(status(&named, "POST", Some("idem.example.com"), None), 200);
        assert_eq!(status(&named, "POST", Some("10.1.2.3:7676"), None), 200);
        assert_eq!(status(&named, "POST", Some("evil.example"), None), 421);
    }

    #[test]
    fn a_state_changing_request_from_another_origin_is_refused() {
        let guard = Guard::new("127.0.0.1:7676".parse().unwrap(), false, &[]);
        let host = Some("127.0.0.1:7676");
        assert_eq!(status(&guard, "POST", host, None), 200);
        assert_eq!(
            status(&guard, "POST", host, Some("http://127.0.0.1:7676")),
            200
        );
        for origin in [
            "http://evil.example",
            "null",
            "http://127.0.0.1:7677",
            "http://localhost:7676",
            "file:///x",
            "http://127.0.0.1:7676/path",
            "",
        ] {
            assert_eq!(status(&guard, "POST", host, Some(origin)), 403, "{origin}");
        }
        // A read changes nothing: its Origin is not checked.
        assert_eq!(
            status(&guard, "GET", host, Some("http://evil.example")),
            200
        );
        // Behind a TLS proxy that keeps the Host.
        let proxied = Guard::new(
            "127.0.0.1:7676".parse().unwrap(),
            true,
            &["idem.example.com".into()],
        );
        assert_eq!(
            status(
                &proxied,
                "POST",
                Some("idem.example.com"),
                Some("https://idem.example.com")
            ),
            200
        );
        assert_eq!(
            status(
                &proxied,
                "POST",
                Some("127.0.0.1:7676"),
                Some("https://idem.example.com")
            ),
            200
        );
        assert_eq!(
            status(
                &proxied,
                "POST",
                Some("idem.example.com"),
                Some("https://evil.example")
            ),
            403
        );
    }
}
