//! # idem-http: the `Idempotency-Key` header as a tower layer
//!
//! [`IdempotencyLayer`] runs every matching request (by default `POST` and
//! `PATCH`) through an idem policy — `http-idempotency-key` by default — as
//! the IETF httpapi `Idempotency-Key` draft and Stripe describe:
//!
//! | the request | the answer |
//! |---|---|
//! | a key the policy has not seen | the handler runs once, with a [`FencedKey`] extension; its response is stored |
//! | no key, where the policy requires one | `400`, nothing runs |
//! | the key reused with another method, path or body | `422` (the policy's status) |
//! | the first request with the key still in flight | `409` with a `Retry-After` of [its own](IdempotencyLayer::in_flight_retry_after) |
//! | a completed request's key | its stored status, [replayed headers](IdempotencyLayer::replayed_headers) and body, with `Idempotent-Replayed: true` |
//! | a body past the [limit](IdempotencyLayer::body_limit) | `413` |
//!
//! Every other answer to a request with a key carries `Idempotent-Replayed:
//! false`. A service that settles a record waiting for review itself
//! (`idem::forensics::review::resolve`) stores the response to replay with
//! [`stored_outcome`].
//!
//! The other side of the same header: a service that *is* the downstream
//! (a provider adapter, an internal ledger) puts a [`GateLayer`] in front of
//! its writes. It reads `Idempotency-Key` and `Idem-Fence` ([`IDEM_FENCE`]),
//! the key and fence an idem holder sends, admits each key once, replays
//! its stored response to a repeat, and refuses a fence lower than the
//! highest it has seen for the key ([`gate`]).
//!
//! Every error is an RFC 9457 `application/problem+json` body ([`problem`]).
//! The request body is read once, bounded, hashed into the operation's
//! `body_sha256`, and handed on to the handler as it came.
//!
//! The layer never decides what a duplicate gets: the policy does. It records
//! how the handler ended ([`IdempotencyLayer::ending`]: by default 2xx/3xx
//! completed, 4xx failed for good, 5xx failed and retryable), and the policy's
//! `on-duplicate` decides whether that is replayed or re-executed. The
//! handler is polled in the request's own task, its claim heartbeated
//! beside it. A client that hangs up does not cancel an effect half way:
//! when the server drops a request whose handler has not finished, what is
//! left of the handler and of recording its end is handed to a task of its
//! own and runs to its end, so the end is still recorded and the retry
//! gets it.
//!
//! ```no_run
//! # async fn example(engine: idem::engine::Engine) {
//! use axum::{Extension, Router, routing::post};
//! use idem_http::{FencedKey, IdempotencyLayer};
//!
//! async fn charge(Extension(claim): Extension<FencedKey>, body: String) -> String {
//!     // Hand claim.key and claim.fence to the payment provider.
//!     format!("charged under {} at fence {}", claim.key, claim.fence)
//! }
//!
//! let app: Router = Router::new()
//!     .route("/charges", post(charge))
//!     .layer(IdempotencyLayer::new(engine).tenant("shop"));
//! # }
//! ```

#![warn(missing_docs)]

mod config;
mod duplicate;
mod finish_on_drop;
pub mod gate;
mod handler;
mod layer;
mod operation;
pub mod problem;
mod request_body;
mod response_body;
mod service;
mod stored;

pub use gate::{GateAdmission, GateEnd, GateLayer, GateService, default_gate_end};
pub use layer::{DEFAULT_IN_FLIGHT_RETRY_AFTER, IdempotencyLayer, default_ending};
pub use operation::KIND;
pub use response_body::ResponseBody;
pub use service::{FencedKey, IdempotencyService};
pub use stored::{DEFAULT_REPLAYED_HEADERS, stored_outcome};

/// The request header carrying the client's key (`Idempotency-Key`).
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";

/// The request header carrying the holder's fencing token (`Idem-Fence`),
/// beside `Idempotency-Key`: what idem's holders send a downstream (the
/// handler's [`FencedKey::fence`], a command's `IDEM_FENCE`), and what a
/// [`GateLayer`] in front of that downstream reads. A whole number; the
/// downstream refuses one lower than the highest it has seen for the key.
pub const IDEM_FENCE: &str = "idem-fence";

/// The response header saying whether an answer is a replay
/// (`Idempotent-Replayed: true`, as Stripe sends it) or not (`false`: a
/// fresh response or a problem), on every answer to a request with a key.
pub const IDEMPOTENT_REPLAYED: &str = "idempotent-replayed";
