//! The review console (`idem serve --console`): pages for the people who
//! decide whether a charge happened, without a shell on the right machine.
//!
//! - [`list`]: `GET /console`, the records waiting for review, completed,
//!   settled by a person or all, searched by an operation's field and
//!   paged; the duplicates by cause over a chosen window.
//! - [`record`]: `GET /console/record/{key}`, one record: its operation,
//!   timeline, fence, last holder, who settled it and why, and the form
//!   that settles it while it waits.
//! - [`settle`]: `POST /console/resolve`, that form — conditional on the
//!   fence the page showed, so a stale page cannot overwrite a newer
//!   outcome.
//! - [`page`]: what every page shares; [`tokens`]: the forms' and
//!   sessions' MACs.
//!
//! Authentication is the sidecar's token: sent once to `/console/login`,
//! it opens a session held in memory (a random id in an `HttpOnly`,
//! `SameSite=Strict` cookie scoped to `/console`; never in a URL), or sent
//! as `Authorization: Bearer` on each request; the cookie is `Secure` when
//! the console is said to be served over TLS
//! ([`SidecarOptions::console_behind_tls`](crate::SidecarOptions)). A
//! state-changing form also carries an HMAC of the record's key and the
//! fence under the session's own secret ([`tokens`]), so a cross-site
//! request cannot forge one. Every
//! resolution goes through [`idem::forensics::review::resolve`]: logged
//! with who and why, counted, like `idem resolve`.

mod list;
mod page;
mod record;
mod settle;
mod tokens;

pub(crate) use list::show;
pub(crate) use record::show as show_record;
pub(crate) use settle::resolve;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Form;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use crate::App;
use crate::auth::strip_bearer;

/// The session cookie's name.
const COOKIE: &str = "idem_console";
/// How long a session lasts without being used.
const SESSION_IDLE: Duration = Duration::from_secs(8 * 3600);

/// The console's sessions: random ids, each with a secret its forms are
/// signed with. A session is kept under an HMAC of its id
/// ([`tokens::session_key`]): a lookup compares MACs, never the caller's
/// bytes with a live id.
pub(crate) struct Sessions {
    live: Mutex<HashMap<[u8; 32], Session>>,
    key: [u8; 32],
}

struct Session {
    secret: [u8; 32],
    last_used: Instant,
}

fn random_bytes() -> [u8; 32] {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).expect("the operating system's random generator");
    bytes
}

impl Sessions {
    fn new() -> Self {
        Sessions {
            live: Mutex::default(),
            key: random_bytes(),
        }
    }

    /// A new session's id.
    fn open(&self) -> String {
        let id = tokens::hex(&random_bytes());
        let mut live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        live.retain(|_, s| s.last_used.elapsed() < SESSION_IDLE);
        live.insert(
            tokens::session_key(&self.key, &id),
            Session {
                secret: random_bytes(),
                last_used: Instant::now(),
            },
        );
        id
    }

    /// The secret of live session `id`, marking it used.
    fn secret(&self, id: &str) -> Option<[u8; 32]> {
        let key = tokens::session_key(&self.key, id);
        let mut live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        let session = live.get_mut(&key)?;
        if session.last_used.elapsed() >= SESSION_IDLE {
            live.remove(&key);
            return None;
        }
        session.last_used = Instant::now();
        Some(session.secret)
    }

    fn close(&self, id: &str) {
        self.live
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&tokens::session_key(&self.key, id));
    }
}

/// Who is asking: a session (its id and form secret), a bearer token on
/// this request, or anyone when the sidecar has no token (loopback only).
enum Caller {
    Session { id: String, secret: [u8; 32] },
    Bearer,
    Open,
}

impl Caller {
    /// The secret forms are signed with: the session's, or for a bearer
    /// caller one derived from nothing a cross-site page could send.
    fn secret(&self, sessions_key: &[u8; 32]) -> [u8; 32] {
        match self {
            Caller::Session { secret, .. } => *secret,
            Caller::Bearer | Caller::Open => *sessions_key,
        }
    }
}

/// The console's state beside the app's.
pub(crate) struct Console {
    pub(crate) sessions: Sessions,
    /// Signs the forms of callers without a session (bearer or open).
    pub(crate) server_secret: [u8; 32],
    /// Whether the session cookie is `Secure` (the console is reached
    /// over TLS, through a proxy).
    pub(crate) behind_tls: bool,
}

impl Console {
    pub(crate) fn new(behind_tls: bool) -> Self {
        Console {
            sessions: Sessions::new(),
            server_secret: random_bytes(),
            behind_tls,
        }
    }

    /// The session cookie's attributes after its value.
    fn cookie_attributes(&self, max_age: u64) -> String {
        format!(
            "Path=/console; HttpOnly; SameSite=Strict;{} Max-Age={max_age}",
            if self.behind_tls { " Secure;" } else { "" }
        )
    }
}

fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.to_string())
}

fn caller(app: &App, headers: &HeaderMap) -> Option<Caller> {
    let console = app.console.as_ref()?;
    let Some(token) = &app.token else {
        return Some(Caller::Open);
    };
    if let Some(given) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| strip_bearer(v.as_bytes()))
    {
        return token.matches(given).then_some(Caller::Bearer);
    }
    let id = cookie(headers, COOKIE)?;
    let secret = console.sessions.secret(&id)?;
    Some(Caller::Session { id, secret })
}

/// Every console answer is HTML that may load nothing from anywhere.
fn html(status: StatusCode, body: String) -> Response {
    let mut response = (status, body).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'",
        ),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    // `same-origin`, not `no-referrer`: no other site learns the page's
    // address either way, and with `no-referrer` a browser sends its forms
    // with `Origin: null`, which the Origin check must refuse.
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    response
}

fn see_other(to: &str) -> Response {
    let mut response = StatusCode::SEE_OTHER.into_response();
    if let Ok(v) = HeaderValue::from_str(to) {
        response.headers_mut().insert(header::LOCATION, v);
    }
    response
}

/// The login form's one field.
#[derive(Debug, Deserialize)]
pub(crate) struct Login {
    token: String,
}

/// `POST /console/login`: the sidecar's token, once, for a session.
pub(crate) async fn login(State(app): State<Arc<App>>, Form(login): Form<Login>) -> Response {
    let (Some(console), Some(token)) = (&app.console, &app.token) else {
        return see_other("/console");
    };
    if !token.matches(login.token.trim().as_bytes()) {
        return html(
            StatusCode::UNAUTHORIZED,
            page::login(Some("that is not this server's token")),
        );
    }
    let id = console.sessions.open();
    let mut response = see_other("/console");
    let cookie = format!(
        "{COOKIE}={id}; {}",
        console.cookie_attributes(SESSION_IDLE.as_secs())
    );
    if let Ok(v) = HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(header::SET_COOKIE, v);
    }
    response
}

/// `POST /console/logout`.
pub(crate) async fn logout(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    let Some(console) = &app.console else {
        return see_other("/console");
    };
    if let Some(Caller::Session { id, .. }) = caller(&app, &headers) {
        console.sessions.close(&id);
    }
    let mut response = see_other("/console");
    if let Ok(v) = HeaderValue::from_str(&format!("{COOKIE}=; {}", console.cookie_attributes(0))) {
        response.headers_mut().insert(header::SET_COOKIE, v);
    }
    response
}
