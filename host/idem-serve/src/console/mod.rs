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
//! as `Authorization: Bearer` on each request. A state-changing form also
//! carries a token derived from the session's own secret, the record's key
//! and the fence, so a cross-site request cannot forge one. Every
//! resolution goes through [`idem::forensics::review::resolve`]: logged
//! with who and why, counted, like `idem resolve`.

mod page;

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
use sha2::{Digest as _, Sha256};

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
/// signed with.
#[derive(Default)]
pub(crate) struct Sessions {
    live: Mutex<HashMap<String, Session>>,
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

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl Sessions {
    /// A new session's id.
    fn open(&self) -> String {
        let id = hex(&random_bytes());
        let mut live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        live.retain(|_, s| s.last_used.elapsed() < SESSION_IDLE);
        live.insert(
            id.clone(),
            Session {
                secret: random_bytes(),
                last_used: Instant::now(),
            },
        );
        id
    }

    /// The secret of live session `id`, marking it used.
    fn secret(&self, id: &str) -> Option<[u8; 32]> {
        let mut live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        let session = live.get_mut(id)?;
        if session.last_used.elapsed() >= SESSION_IDLE {
            live.remove(id);
            return None;
        }
        session.last_used = Instant::now();
        Some(session.secret)
    }

    fn close(&self, id: &str) {
        self.live
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(id);
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
}

impl Console {
    pub(crate) fn new() -> Self {
        Console {
            sessions: Sessions::default(),
            server_secret: random_bytes(),
        }
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

/// The per-form token: the caller's secret bound to one record at one
/// fence.
fn form_token(secret: &[u8; 32], key: &RecordKey, fence: u64) -> String {
    let mut h = Sha256::new();
    h.update(secret);
    h.update(key.to_string().as_bytes());
    h.update(b"\n");
    h.update(fence.to_string().as_bytes());
    hex(&h.finalize())
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
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
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
        .map(|w| form_token(&secret, &w.view.record.key, w.view.record.fence))
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
        "{COOKIE}={id}; Path=/console; HttpOnly; SameSite=Strict; Max-Age={}",
        SESSION_IDLE.as_secs()
    );
    if let Ok(v) = HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(header::SET_COOKIE, v);
    }
    response
}

/// `POST /console/logout`.
pub(crate) async fn logout(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    if let (Some(console), Some(Caller::Session { id, .. })) =
        (&app.console, caller(&app, &headers))
    {
        console.sessions.close(&id);
    }
    let mut response = see_other("/console");
    response.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_static(
            "idem_console=; Path=/console; HttpOnly; SameSite=Strict; Max-Age=0",
        ),
    );
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
    let expected = form_token(&caller.secret(&console.server_secret), &key, form.fence);
    if !bool::from(subtle::ConstantTimeEq::ct_eq(
        expected.as_bytes(),
        form.form_token.as_bytes(),
    )) {
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
    let status = match form.status.trim() {
        "" => None,
        text => match text.parse::<i32>() {
            Ok(n) => Some(n),
            Err(_) => {
                let notice = refuse(format!("status `{text}` is not a whole number"));
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
            let why = match &e {
                StoreError::Fenced { fence, current, .. } => format!(
                    "the record moved on since this page showed fence {fence} (it is at fence {current} now): nothing changed; look at it again below"
                ),
                StoreError::NotEligible { state, .. } => format!(
                    "the record is {} and no longer waits for review: nothing changed",
                    state.as_str()
                ),
                other => format!("the store refused it: {other}"),
            };
            render(
                &app,
                &caller,
                window,
                Some(refuse(why)),
                StatusCode::CONFLICT,
            )
            .await
        }
    }
}
