//! # idem-serve: the `idem serve` sidecar
//!
//! A service that is not written in Rust cannot link the idem library; it
//! can speak HTTP. [`Sidecar`] puts one policy and one store behind a small
//! JSON API — every call a `POST` with a JSON object, every answer a JSON
//! object or an RFC 9457 `application/problem+json` body naming what was
//! wrong:
//!
//! | route | what it does |
//! |---|---|
//! | `/v1/derive` | an operation's key, fingerprint and partition (no store access) |
//! | `/v1/begin` | claims the operation: `execute` (with key, fence, attempt, lease), `replay` (the stored outcome), `in-progress`, `conflict` or `rejected` |
//! | `/v1/complete` | records the outcome under the fence begin handed out |
//! | `/v1/fail` | records a failure, retryable or not, under the fence |
//! | `/v1/heartbeat` | extends the claim's lease, under the fence |
//! | `/v1/resolve` | settles a record waiting for review (completed, released, rejected), conditional on the fence seen |
//! | `/v1/report` | why it ran twice: the attempt log's analysis |
//!
//! With [`SidecarOptions::console`], `/console` serves a review console for
//! people (the records waiting for review, the duplicates by cause, a form
//! to settle one). With [`SidecarOptions::metrics`], `GET /metrics` serves the engine's and
//! the store's metrics in Prometheus's text format ([`MetricsExport`]).
//!
//! The sidecar holds no claim in memory: begin hands out the key and the
//! fence, and the later calls carry them back and are the store's
//! fence-conditional writes ([`Engine::finish_fenced`],
//! [`Engine::heartbeat_fenced`]), so a restart of the sidecar loses
//! nothing, and a deposed holder's late write is refused (`409`, naming the
//! fence). A bad request — malformed JSON, a member of the wrong type, an
//! unknown or missing member, a body past the limit — is refused before
//! anything reaches the store, as is any text holding a NUL (no store
//! keeps one), naming its member.
//!
//! What a web page could make a browser send is refused before any route
//! runs (the `browser` module): a `Host` the sidecar does not answer to
//! (DNS rebinding), a state-changing request from another `Origin`, and an
//! API body that is not labelled JSON.
//!
//! The OpenAPI document is `docs/reference/serve-openapi.json` in the repository.

#![warn(missing_docs)]

mod api;
mod auth;
mod browser;
mod connections;
mod console;
mod handlers;
mod json;
mod metrics_export;
mod problem;
mod request_span;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::routing::{get, post};
use idem::engine::Engine;
use tokio::sync::watch;

pub use auth::Token;
pub use connections::{
    ConnectionLimits, DEFAULT_MAX_CONNECTIONS, Drained, default_max_connections,
};
pub use metrics_export::{MetricsExport, REVIEW_OLDEST, REVIEW_WAITING};

/// Escapes text for HTML content and attribute values: what the review
/// console's pages and `idem report --html` put in their markup.
pub fn html_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Untrusted text (an operation's fields, a reason, an actor, an id) for
/// HTML: every control and bidi character spelt `\u{…}` first
/// ([`idem::core::text::escaped`]: `"\u{202e}RUE 0001"` would otherwise
/// read as "1000 EUR"), then the markup escaped ([`html_escape`]).
pub fn html_shown(text: &str) -> String {
    html_escape(&idem::core::text::escaped(text))
}

/// Every route the sidecar answers, as (method, path): the router is built
/// from this list, and the OpenAPI document is checked against it.
pub const ROUTES: [(&str, &str); 7] = [
    ("POST", "/v1/derive"),
    ("POST", "/v1/begin"),
    ("POST", "/v1/complete"),
    ("POST", "/v1/fail"),
    ("POST", "/v1/heartbeat"),
    ("POST", "/v1/resolve"),
    ("POST", "/v1/report"),
];

/// The default limit on a request body: 1 MiB.
pub const DEFAULT_BODY_LIMIT: usize = 1 << 20;

/// Settings of a [`Sidecar`].
#[derive(Debug, Clone)]
pub struct SidecarOptions {
    /// The bearer token every call must carry; `None`: no authentication
    /// (only sensible on a loopback address, which the CLI enforces).
    pub token: Option<Token>,
    /// The largest request body accepted, in bytes (`413` past it).
    pub body_limit: usize,
    /// Timeouts, the connection cap and the drain deadline ([`Sidecar::run`]).
    pub limits: ConnectionLimits,
    /// Serve `GET /metrics` (Prometheus's text format, behind the token)
    /// from this recorder; `None`: no such route.
    pub metrics: Option<MetricsExport>,
    /// Serve the review console under `/console` (signed in with the
    /// token, see the `console` module's documentation).
    pub console: bool,
    /// The console is reached over TLS (through a proxy): its session
    /// cookie is `Secure`, so a browser never sends it over plain HTTP.
    pub console_behind_tls: bool,
    /// Names the sidecar answers to besides its listen address (`name`,
    /// any port, or `name:port`): the `Host` a proxy in front of it
    /// forwards, or a name of this machine. Without a token, any other
    /// `Host` is refused (`421`); with a token, `Host` is checked only
    /// when this list is not empty.
    pub allowed_hosts: Vec<String>,
}

impl Default for SidecarOptions {
    fn default() -> Self {
        SidecarOptions {
            token: None,
            body_limit: DEFAULT_BODY_LIMIT,
            limits: ConnectionLimits::default(),
            metrics: None,
            console: false,
            console_behind_tls: false,
            allowed_hosts: Vec::new(),
        }
    }
}

/// What every handler shares.
pub(crate) struct App {
    pub(crate) engine: Engine,
    pub(crate) body_limit: usize,
    /// How long a request's body may take to arrive (`408` past it).
    pub(crate) body_timeout: std::time::Duration,
    /// The recorder `GET /metrics` reads, when it is served.
    pub(crate) metrics: Option<MetricsExport>,
    /// The token, for the console's own sign-in (the API's calls are
    /// checked by the middleware).
    pub(crate) token: Option<Token>,
    /// The review console's sessions, when it is served.
    pub(crate) console: Option<console::Console>,
    /// Becomes `true` when the sidecar starts to stop: a body still
    /// arriving then is answered `503` at once (see `json`).
    pub(crate) stopping: tokio::sync::watch::Receiver<bool>,
}

/// One policy and one store behind the JSON API.
#[derive(Clone)]
pub struct Sidecar {
    engine: Engine,
    options: SidecarOptions,
}

impl std::fmt::Debug for Sidecar {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sidecar")
            .field("store", &self.engine.store().describe())
            .field("policy", &self.engine.policy().digest())
            .field("options", &self.options)
            .finish()
    }
}

impl Sidecar {
    /// A sidecar answering for `engine` (its policy, store and lease).
    pub fn new(engine: Engine, options: SidecarOptions) -> Self {
        Sidecar { engine, options }
    }

    /// The routes for a sidecar listening on `local`, authenticated when a
    /// token is set, behind the browser checks; unknown paths and methods
    /// are problems too. `stopping` turns `true` when it starts to stop.
    fn router(&self, local: SocketAddr, stopping: watch::Receiver<bool>) -> Router {
        let app = Arc::new(App {
            engine: self.engine.clone(),
            body_limit: self.options.body_limit,
            body_timeout: self.options.limits.body,
            metrics: self.options.metrics.clone(),
            token: self.options.token.clone(),
            console: self
                .options
                .console
                .then(|| console::Console::new(self.options.console_behind_tls)),
            stopping,
        });
        let mut router = Router::new();
        for (_, path) in ROUTES {
            let route = match path {
                "/v1/derive" => post(handlers::derive),
                "/v1/begin" => post(handlers::begin),
                "/v1/complete" => post(handlers::complete),
                "/v1/fail" => post(handlers::fail),
                "/v1/heartbeat" => post(handlers::heartbeat),
                "/v1/resolve" => post(handlers::resolve),
                "/v1/report" => post(handlers::report),
                other => unreachable!("no handler for {other}"),
            };
            router = router.route(path, route.fallback(handlers::method_not_allowed));
        }
        if self.options.metrics.is_some() {
            router = router.route(
                "/metrics",
                get(metrics_export::scrape).fallback(handlers::method_not_allowed),
            );
        }
        let router = router.fallback(handlers::not_found);
        let router = match &self.options.token {
            Some(token) => router.layer(axum::middleware::from_fn_with_state(
                Arc::new(token.clone()),
                auth::require,
            )),
            None => router,
        };
        // The console's routes are added after the token layer: a browser
        // signs in once (the console checks its session or the token).
        let router = if self.options.console {
            router
                .route("/console", get(console::show))
                .route("/console/record/{key}", get(console::show_record))
                .route("/console/login", post(console::login))
                .route("/console/logout", post(console::logout))
                .route("/console/resolve", post(console::resolve))
        } else {
            router
        };
        // Outermost: nothing a browser was made to send reaches a route,
        // the token check or the console.
        let guard = browser::Guard::new(
            local,
            self.options.token.is_some(),
            &self.options.allowed_hosts,
        );
        router
            .layer(axum::middleware::from_fn_with_state(
                Arc::new(guard),
                browser::check,
            ))
            // Around everything, a refused request included: its span.
            .layer(axum::middleware::from_fn(request_span::trace))
            .with_state(app)
    }

    /// Serves on `listener` within the options' [`ConnectionLimits`] until
    /// `shutdown` resolves; then stops accepting, closes idle connections,
    /// answers `503` to the requests whose body is still arriving, gives
    /// the calls in flight the drain deadline to finish (cutting what
    /// still runs then), and writes the answers still queued for the
    /// attempt log ([`Engine::flush_log`]) before returning how it went.
    pub async fn run(
        &self,
        listener: tokio::net::TcpListener,
        shutdown: impl Future<Output = ()>,
    ) -> Drained {
        let (stop, stopping) = watch::channel(false);
        // A listener whose address cannot be read answers to no name but
        // those given (`Host` is then refused when checked).
        let local = listener
            .local_addr()
            .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
        let router = self.router(local, stopping);
        let drained =
            connections::serve(listener, router, self.options.limits, shutdown, stop).await;
        self.engine.flush_log().await;
        drained
    }
}

#[cfg(test)]
mod tests {
    use super::html_shown;

    #[test]
    fn untrusted_text_is_spelt_out_then_escaped() {
        assert_eq!(html_shown("\u{202e}RUE 0001"), "\\u{202e}RUE 0001");
        assert_eq!(
            html_shown("<b>\u{1b}[2J</b>"),
            "&lt;b&gt;\\u{1b}[2J&lt;/b&gt;"
        );
        assert_eq!(html_shown("R-189 & co"), "R-189 &amp; co");
    }
}
