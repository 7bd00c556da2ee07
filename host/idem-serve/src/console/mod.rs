//! The review console (`idem serve --console`): a page for the people who
//! decide whether a charge happened, without a shell on the right machine.
//! It lists the records waiting for review with their operation and
//! timeline, the duplicates by cause over a chosen window, and a form to
//! settle one — conditional on the fence the page showed, so a stale page
//! cannot overwrite a newer outcome.
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

mod page;
mod tokens;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Form;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use idem::forensics::{self, review};
use idem::store::{
    AttemptFilter, Holder, Outcome, RecordKey, Resolution, ResolveRequest, StoreError,
};
use serde::Deserialize;

use crate::App;
use crate::auth::strip_bearer;

/// The session cookie's name.
const COOKIE: &str = "idem_console";
/// How long a session lasts without being used.
const SESSION_IDLE: Duration = Duration::from_secs(8 * 3600);
/// At most this many records waiting are drawn (the page says how many
/// more wait).
const SHOWN_WAITING: usize = 50;

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

/// `?window=24h&done=KEY`.
#[derive(Debug, Deserialize, Default)]
pub(crate) struct PageQuery {
    window: Option<String>,
    done: Option<String>,
}

/// The windows the page offers, as (name, ms).
const WINDOWS: [(&str, u64); 4] = [
    ("1h", 3_600_000),
    ("24h", 86_400_000),
    ("7d", 7 * 86_400_000),
    ("30d", 30 * 86_400_000),
];

/// `GET /console`.
pub(crate) async fn show(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Query(query): Query<PageQuery>,
) -> Response {
    let Some(caller) = caller(&app, &headers) else {
        return html(StatusCode::UNAUTHORIZED, page::login(None));
    };
    let notice = query.done.map(page::Notice::Done);
    render(
        &app,
        &caller,
        query.window.as_deref(),
        notice,
        StatusCode::OK,
    )
    .await
}

async fn render(
    app: &App,
    caller: &Caller,
    window: Option<&str>,
    notice: Option<page::Notice>,
    status: StatusCode,
) -> Response {
    let console = app.console.as_ref().expect("the console is on");
    let store = app.engine.store();
    let namespace = app.engine.policy().info().namespace.clone();
    let window = WINDOWS
        .iter()
        .find(|(name, _)| Some(*name) == window)
        .unwrap_or(&WINDOWS[1]);
    // Every answer given before the page was asked for is on it (answers
    // reach the log in batches).
    app.engine.flush_log().await;
    let read = async {
        let (waiting, total) =
            review::waiting_for_review(store, Some(&namespace), SHOWN_WAITING).await?;
        let now = store.clock().now_ms();
        let entries = forensics::read_log(
            store,
            AttemptFilter {
                namespace: Some(namespace.clone()),
                since_ms: Some(now.saturating_sub(window.1)),
                ..AttemptFilter::default()
            },
        )
        .await?;
        Ok::<_, StoreError>((waiting, total, forensics::analyse(&entries)))
    };
    let (waiting, total, analysis) = match read.await {
        Ok(read) => read,
        Err(e) => {
            return html(
                StatusCode::SERVICE_UNAVAILABLE,
                page::unavailable(&format!("cannot read the store: {e}")),
            );
        }
    };
    let secret = caller.secret(&console.server_secret);
    let forms: Vec<String> = waiting
        .iter()
        .map(|w| tokens::form_token(&secret, &w.view.record.key, w.view.record.fence))
        .collect();
    let view = page::View {
        namespace: &namespace,
        store: store.describe(),
        waiting: &waiting,
        total,
        forms: &forms,
        analysis: &analysis,
        window: window.0,
        windows: WINDOWS.iter().map(|(name, _)| *name).collect(),
        notice,
        signed_in: matches!(caller, Caller::Session { .. }),
    };
    html(status, page::console(&view))
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

/// The resolve form.
#[derive(Debug, Deserialize)]
pub(crate) struct ResolveForm {
    key: String,
    fence: u64,
    form_token: String,
    resolution: String,
    #[serde(default)]
    status: String,
    #[serde(default)]
    body: String,
    #[serde(default)]
    reason: String,
    #[serde(default)]
    by: String,
    #[serde(default)]
    window: String,
    /// `yes` when the person ticked that refusing for good is meant.
    #[serde(default)]
    confirm_reject: String,
}

/// `POST /console/resolve`: settles one record, conditional on the fence
/// the page showed.
pub(crate) async fn resolve(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Form(form): Form<ResolveForm>,
) -> Response {
    let Some(caller) = caller(&app, &headers) else {
        return html(StatusCode::UNAUTHORIZED, page::login(None));
    };
    let console = app.console.as_ref().expect("the console is on");
    let namespace = app.engine.policy().info().namespace.clone();
    let window = Some(form.window.as_str());
    let refuse = |why: String| page::Notice::Refused(why);
    let Some(digest) = idem::store::Digest::from_hex(&form.key) else {
        let notice = refuse(format!("`{}` is not a record key", form.key));
        return render(&app, &caller, window, Some(notice), StatusCode::BAD_REQUEST).await;
    };
    let key = RecordKey::new(namespace, digest);
    let secret = caller.secret(&console.server_secret);
    if !tokens::form_token_matches(&secret, &key, form.fence, &form.form_token) {
        // A form from another session, another page, or another site.
        let notice = refuse(
            "the form's token does not match this session: reload the page and try again".into(),
        );
        return render(&app, &caller, window, Some(notice), StatusCode::FORBIDDEN).await;
    }
    let (reason, by) = (form.reason.trim(), form.by.trim());
    if reason.is_empty() || by.is_empty() {
        let notice = refuse("say who decides and why: both are kept in the attempt log".into());
        return render(&app, &caller, window, Some(notice), StatusCode::BAD_REQUEST).await;
    }
    for (text, name) in [
        (reason, "why"),
        (by, "who decides"),
        (&form.body[..], "body"),
    ] {
        if let Some(why) = idem::core::text::unstorable(text) {
            let notice = refuse(format!("“{name}” {why}: nothing changed"));
            return render(&app, &caller, window, Some(notice), StatusCode::BAD_REQUEST).await;
        }
    }
    let status = match form.status.trim() {
        "" => None,
        text => match text.parse::<i32>() {
            Ok(n) if crate::api::STATUS_RANGE.contains(&n) => Some(n),
            _ => {
                let (low, high) = (
                    crate::api::STATUS_RANGE.start(),
                    crate::api::STATUS_RANGE.end(),
                );
                let notice = refuse(format!(
                    "status `{text}` is not a whole number from {low} to {high} (an exit status or an HTTP status)"
                ));
                return render(&app, &caller, window, Some(notice), StatusCode::BAD_REQUEST).await;
            }
        },
    };
    let resolution = match form.resolution.as_str() {
        "completed" => Resolution::Completed(Outcome::new(
            status.unwrap_or(0),
            form.body.clone().into_bytes(),
        )),
        "release" => Resolution::Release,
        // Every later retry of the operation gets this refusal: a mistake
        // here is the hardest to undo, so it is asked twice.
        "reject" if form.confirm_reject != "yes" => {
            let notice = refuse(
                "refusing for good needs its box ticked (every retry of this operation will be \
                 refused): nothing changed"
                    .into(),
            );
            return render(&app, &caller, window, Some(notice), StatusCode::BAD_REQUEST).await;
        }
        "reject" => Resolution::Reject {
            status: status.unwrap_or(1),
        },
        other => {
            let notice = refuse(format!(
                "`{other}` is not a resolution (completed, release or reject)"
            ));
            return render(&app, &caller, window, Some(notice), StatusCode::BAD_REQUEST).await;
        }
    };
    let mut holder = Holder::this_process();
    holder.trigger = Some("manual".into());
    let request = ResolveRequest {
        key: key.clone(),
        observed_fence: form.fence,
        resolution,
        by: format!("{by} (console)"),
        reason: reason.to_string(),
        holder,
    };
    match review::resolve(app.engine.store(), request).await {
        Ok(_) => see_other(&format!(
            "/console?window={}&done={}",
            page::url_safe(&form.window),
            key.digest.to_hex()
        )),
        Err(e) => {
            // The status the API gives the same refusal: a request the store
            // finds invalid (a reason past what the log keeps, a body past
            // the cap) is the form's fault (400), an outage is 503, a record
            // that moved on is 409.
            let status = crate::problem::store_error(e.clone()).0.status;
            let why = match &e {
                StoreError::Fenced { .. } | StoreError::NotEligible { .. } => {
                    moved_on(app.engine.store(), &key, form.fence).await
                }
                StoreError::InvalidRequest(why) => format!("{why}: nothing changed"),
                other if status.is_server_error() => {
                    format!("the store could not be reached: {other}; nothing changed, try again")
                }
                other => format!("the store refused it: {other}"),
            };
            render(&app, &caller, window, Some(refuse(why)), status).await
        }
    }
}

/// Why a settle form was refused for a record that moved on since its page
/// was drawn: what the record is now and, when a person settled it since,
/// who and how (from the attempt log), and whether it still waits below.
async fn moved_on(store: &idem::store::Store, key: &idem::store::RecordKey, shown: u64) -> String {
    let Ok(Some(now)) = store.records().get(key).await else {
        return format!(
            "the record moved on since this page showed fence {shown}: nothing changed"
        );
    };
    let mut why = format!(
        "the record moved on since this page showed fence {shown}: it is {} at fence {} now",
        now.record.state.as_str(),
        now.record.fence
    );
    let log = store
        .records()
        .attempts(AttemptFilter {
            key: Some(key.clone()),
            ..AttemptFilter::default()
        })
        .await
        .unwrap_or_default();
    if let Some(settled) = log
        .iter()
        .rev()
        .find(|e| e.actor.is_some() && e.fence > shown)
    {
        why.push_str(&format!(
            "; {} settled it ({}{})",
            settled.actor.as_deref().unwrap_or_default(),
            settled.event.as_str(),
            settled
                .detail
                .as_deref()
                .map(|d| format!(": {d}"))
                .unwrap_or_default()
        ));
    }
    why.push_str(if review::waits_for_review(&now).is_some() {
        "; nothing changed; look at it again below"
    } else {
        "; nothing changed"
    });
    why
}
