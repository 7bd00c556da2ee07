//! The layer and its settings.

use std::sync::Arc;
use std::time::Duration;

use http::{HeaderName, Method, StatusCode};
use idem::engine::Engine;
use idem::store::{DEFAULT_MAX_OUTCOME_BYTES, Ending};

use crate::config::{Config, Tenant};
use crate::service::IdempotencyService;
use crate::stored::DEFAULT_REPLAYED_HEADERS;

/// A tower [`Layer`](tower::Layer) running matching requests through an
/// idem [`Engine`]; see the [crate](crate) documentation.
///
/// The engine's policy sees each request as an operation of kind
/// [`KIND`](crate::KIND) with the fields `idempotency_key` (the header,
/// absent when the request has none), `method`, `path` (with the query)
/// and `body_sha256` (absent for an empty body), which is what the
/// `http-idempotency-key` example policy reads.
#[derive(Clone)]
pub struct IdempotencyLayer {
    config: Arc<Config>,
}

impl std::fmt::Debug for IdempotencyLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let c = &self.config;
        f.debug_struct("IdempotencyLayer")
            .field("policy", &c.engine.policy().digest())
            .field("tenant", &c.tenant)
            .field("key_header", &c.key_header)
            .field("methods", &c.methods)
            .field("body_limit", &c.body_limit)
            .field("max_stored_bytes", &c.max_stored_bytes)
            .field("replayed_headers", &c.replayed_headers)
            .field("in_flight_retry_after", &c.in_flight_retry_after)
            .finish_non_exhaustive()
    }
}

/// How a handler's response is recorded unless
/// [`IdempotencyLayer::ending`] says otherwise: 1xx–3xx completed (replayed
/// to every duplicate); 4xx failed for good (the request was refused, and a
/// duplicate is refused the same way, by replay); 5xx failed and retryable
/// (the server's fault: the policy may let a duplicate re-execute, as
/// `http-idempotency-key` does).
pub fn default_ending(status: StatusCode) -> Ending {
    if status.is_server_error() {
        Ending::Failed { retryable: true }
    } else if status.is_client_error() {
        Ending::Failed { retryable: false }
    } else {
        Ending::Completed
    }
}

/// The `Retry-After` of a request in flight unless
/// [`IdempotencyLayer::in_flight_retry_after`] says otherwise: one second,
/// the least `Retry-After` can say.
pub const DEFAULT_IN_FLIGHT_RETRY_AFTER: Duration = Duration::from_secs(1);

impl IdempotencyLayer {
    /// A layer deduplicating through `engine` (its policy and store), for
    /// the tenant `default`, on `POST` and `PATCH`, with a 1 MiB body limit.
    pub fn new(engine: Engine) -> Self {
        IdempotencyLayer {
            config: Arc::new(Config {
                engine,
                tenant: Tenant::Fixed("default".into()),
                key_header: HeaderName::from_static(crate::IDEMPOTENCY_KEY),
                methods: vec![Method::POST, Method::PATCH],
                body_limit: 1024 * 1024,
                max_stored_bytes: DEFAULT_MAX_OUTCOME_BYTES,
                replayed_headers: DEFAULT_REPLAYED_HEADERS
                    .iter()
                    .map(|h| HeaderName::from_static(h))
                    .collect(),
                ending: default_ending,
                kind: crate::KIND.into(),
                in_flight_retry_after: DEFAULT_IN_FLIGHT_RETRY_AFTER,
            }),
        }
    }

    fn with(mut self, change: impl FnOnce(&mut Config)) -> Self {
        change(Arc::make_mut(&mut self.config));
        self
    }

    /// Every request belongs to `tenant` (the key's scope).
    pub fn tenant(self, tenant: impl Into<String>) -> Self {
        let tenant = tenant.into();
        self.with(|c| c.tenant = Tenant::Fixed(tenant))
    }

    /// The tenant is the value of the request header `name` (set by an
    /// authenticating proxy, say); a matching request without it is refused
    /// with 400.
    pub fn tenant_header(self, name: HeaderName) -> Self {
        self.with(|c| c.tenant = Tenant::Header(name))
    }

    /// The header carrying the client's key (default `Idempotency-Key`).
    pub fn key_header(self, name: HeaderName) -> Self {
        self.with(|c| c.key_header = name)
    }

    /// The methods that go through the policy (default `POST` and `PATCH`);
    /// every other request passes straight to the handler.
    pub fn methods(self, methods: impl IntoIterator<Item = Method>) -> Self {
        let methods = methods.into_iter().collect();
        self.with(|c| c.methods = methods)
    }

    /// The largest request body read, in bytes (default 1 MiB); past it the
    /// answer is 413 and nothing runs.
    pub fn body_limit(self, bytes: usize) -> Self {
        self.with(|c| c.body_limit = bytes)
    }

    /// The largest stored response (status line excluded: headers and body),
    /// in bytes (default 64 KiB, the stores' default limit). A larger
    /// response reaches its client whole, and duplicates are replayed its
    /// status and headers with a problem body saying it was too large to
    /// keep.
    pub fn max_stored_bytes(self, bytes: usize) -> Self {
        self.with(|c| c.max_stored_bytes = bytes)
    }

    /// The response headers stored with the body and replayed (default
    /// [`DEFAULT_REPLAYED_HEADERS`]). The policy contract names no headers,
    /// so the host keeps this fixed list of headers that describe the body
    /// or the created resource; never cookies or anything per-connection.
    pub fn replayed_headers(self, names: impl IntoIterator<Item = HeaderName>) -> Self {
        let names = names.into_iter().collect();
        self.with(|c| c.replayed_headers = names)
    }

    /// How a handler's response status is recorded (default
    /// [`default_ending`]). Whether a duplicate then gets it replayed or
    /// re-executed is the policy's decision.
    pub fn ending(self, ending: fn(StatusCode) -> Ending) -> Self {
        self.with(|c| c.ending = ending)
    }

    /// The operation kind the policy sees (default [`KIND`](crate::KIND)).
    pub fn kind(self, kind: impl Into<String>) -> Self {
        let kind = kind.into();
        self.with(|c| c.kind = kind)
    }

    /// How long a client is told to wait (`Retry-After`) before retrying a
    /// key whose first request is still in flight, unless the policy gives
    /// a shorter hint (default [`DEFAULT_IN_FLIGHT_RETRY_AFTER`], 1 s):
    /// about how long the handler usually takes. Never past what is left
    /// of the first request's lease (by then it has ended, or the next
    /// retry is the policy's to decide), rounded up to whole seconds, at
    /// least one.
    ///
    /// A policy's hint of the whole lease that is left (what
    /// `Decision::standard` and the shipped policies give) says no more
    /// than the lease, so this is what a client is told under them.
    pub fn in_flight_retry_after(self, wait: Duration) -> Self {
        self.with(|c| c.in_flight_retry_after = wait)
    }
}

impl<S> tower::Layer<S> for IdempotencyLayer {
    type Service = IdempotencyService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        IdempotencyService::new(inner, self.config.clone())
    }
}
