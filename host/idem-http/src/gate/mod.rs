//! The gate a downstream keeps, as a tower layer: [`GateLayer`] in front
//! of the handlers that write (a provider's charge endpoint, an internal
//! ledger service), over a store's [`Gates`].
//!
//! A request carries the holder's key (`Idempotency-Key`) and fence
//! (`Idem-Fence`, [`crate::IDEM_FENCE`]), as idem's holders send them
//! (`FencedKey`, `IDEM_KEY` / `IDEM_FENCE`):
//!
//! | the request | the answer |
//! |---|---|
//! | a key the gate has not admitted, or a free one | the handler runs with a [`GateAdmission`] extension; its response is stored (a 5xx releases the key instead) |
//! | the key of a stored response | that response, with `Idempotent-Replayed: true` |
//! | a fence lower than the highest seen for the key | `409`, `…/stale-fence`, naming `highest_fence` |
//! | the key while another admission is in flight | `409`, `…/request-in-flight`, `Retry-After` |
//! | the key with another method, path or body | `422`, `…/key-reused` |
//! | no key, no fence, or one that does not parse | `400` |
//!
//! While the handler runs the layer extends the admission's window
//! (every third of it), so the window only runs out when the process
//! running the handler stops; see [`Gates`] for what the gate then cannot
//! promise.

mod service;

use std::sync::Arc;
use std::time::Duration;

use http::{HeaderName, Method, StatusCode};
use idem::store::{DEFAULT_MAX_OUTCOME_BYTES, Gates, Store};

pub use service::{GateAdmission, GateService};

use crate::stored::DEFAULT_REPLAYED_HEADERS;

/// What the gate does with a handler's response: store it (the key is
/// done, every repeat replays it) or release the key (the handler applied
/// nothing; the next holder is admitted).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GateEnd {
    /// Store the response: the key's effect was applied (or refused for
    /// good, which a repeat must be told the same way).
    Store,
    /// Release the key: the handler applied nothing.
    Release,
}

/// Unless [`GateLayer::ending`] says otherwise: a 5xx releases the key (the
/// handler must then have applied nothing), anything else is stored.
pub fn default_gate_end(status: StatusCode) -> GateEnd {
    if status.is_server_error() {
        GateEnd::Release
    } else {
        GateEnd::Store
    }
}

/// What a [`GateLayer`] was configured with, shared by its services.
#[derive(Clone)]
pub(crate) struct GateConfig {
    pub gates: Arc<dyn Gates>,
    pub gate: String,
    pub key_header: HeaderName,
    pub fence_header: HeaderName,
    pub methods: Vec<Method>,
    pub window: Duration,
    pub body_limit: usize,
    pub max_stored_bytes: usize,
    pub replayed_headers: Vec<HeaderName>,
    pub ending: fn(StatusCode) -> GateEnd,
}

/// A tower [`Layer`](tower::Layer) that keeps the gate in front of a
/// downstream's handlers; see the [module](self) documentation.
#[derive(Clone)]
pub struct GateLayer {
    config: Arc<GateConfig>,
}

impl std::fmt::Debug for GateLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let c = &self.config;
        f.debug_struct("GateLayer")
            .field("gate", &c.gate)
            .field("key_header", &c.key_header)
            .field("fence_header", &c.fence_header)
            .field("methods", &c.methods)
            .field("window", &c.window)
            .finish_non_exhaustive()
    }
}

impl GateLayer {
    /// A gate named `http` in `store`'s tables, on `POST`, `PUT`, `PATCH`
    /// and `DELETE`, with a 60 s window and a 1 MiB body limit.
    pub fn new(store: &Store) -> Self {
        GateLayer {
            config: Arc::new(GateConfig {
                gates: store.gates_handle(),
                gate: "http".into(),
                key_header: HeaderName::from_static(crate::IDEMPOTENCY_KEY),
                fence_header: HeaderName::from_static(crate::IDEM_FENCE),
                methods: vec![Method::POST, Method::PUT, Method::PATCH, Method::DELETE],
                window: Duration::from_secs(60),
                body_limit: 1024 * 1024,
                max_stored_bytes: DEFAULT_MAX_OUTCOME_BYTES,
                replayed_headers: DEFAULT_REPLAYED_HEADERS
                    .iter()
                    .map(|h| HeaderName::from_static(h))
                    .collect(),
                ending: default_gate_end,
            }),
        }
    }

    fn with(mut self, change: impl FnOnce(&mut GateConfig)) -> Self {
        change(Arc::make_mut(&mut self.config));
        self
    }

    /// The gate's name (default `http`): one service may keep several
    /// gates, each its own keys.
    pub fn gate(self, name: impl Into<String>) -> Self {
        let name = name.into();
        self.with(|c| c.gate = name)
    }

    /// The header carrying the key (default `Idempotency-Key`).
    pub fn key_header(self, name: HeaderName) -> Self {
        self.with(|c| c.key_header = name)
    }

    /// The header carrying the fence (default `Idem-Fence`).
    pub fn fence_header(self, name: HeaderName) -> Self {
        self.with(|c| c.fence_header = name)
    }

    /// The methods that pass the gate (default `POST`, `PUT`, `PATCH`,
    /// `DELETE`); every other request goes straight to the handler.
    pub fn methods(self, methods: impl IntoIterator<Item = Method>) -> Self {
        let methods = methods.into_iter().collect();
        self.with(|c| c.methods = methods)
    }

    /// How long an admission holds its key without being extended (default
    /// 60 s, by the store's clock). The layer extends it every third of it
    /// while the handler runs: it runs out when the process does.
    pub fn window(self, window: Duration) -> Self {
        self.with(|c| c.window = window)
    }

    /// The largest request body read (default 1 MiB); past it, `413`.
    pub fn body_limit(self, bytes: usize) -> Self {
        self.with(|c| c.body_limit = bytes)
    }

    /// The largest stored response, headers and body (default 64 KiB); a
    /// larger one is stored as its status and a problem saying so.
    pub fn max_stored_bytes(self, bytes: usize) -> Self {
        self.with(|c| c.max_stored_bytes = bytes)
    }

    /// The response headers stored and replayed (default
    /// [`DEFAULT_REPLAYED_HEADERS`]).
    pub fn replayed_headers(self, names: impl IntoIterator<Item = HeaderName>) -> Self {
        let names = names.into_iter().collect();
        self.with(|c| c.replayed_headers = names)
    }

    /// Which responses are stored and which release the key (default
    /// [`default_gate_end`]).
    pub fn ending(self, ending: fn(StatusCode) -> GateEnd) -> Self {
        self.with(|c| c.ending = ending)
    }
}

impl<S> tower::Layer<S> for GateLayer {
    type Service = GateService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        GateService::new(inner, self.config.clone())
    }
}
