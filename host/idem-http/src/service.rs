//! The service the layer wraps around a handler: one request through the
//! engine.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures_util::FutureExt;
use http::request::Parts;
use http::{HeaderValue, Request, Response, StatusCode};
use http_body::Body;
use idem::core::ErrorCode;
use idem::engine::{Begin, EngineError, Execution, heartbeat_loop};
use idem::store::{Ending, Outcome};
use tower::Service;

use crate::config::Config;
use crate::duplicate;
use crate::finish_on_drop::FinishOnDrop;
use crate::handler::{self, Answering, Ended, HandlerBody, Inner, RequestBody};
use crate::operation::operation;
use crate::problem::Problem;
use crate::request_body::read_bounded;
use crate::response_body::{BoxError, ResponseBody, full};
use crate::stored;

/// The claim a request holds while its handler runs, handed to the handler
/// as a request extension: pass `key` and `fence` on to whatever performs
/// the effect, so it can deduplicate by the key and refuse a deposed
/// holder's lower fence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FencedKey {
    /// The idempotency key the host derived (64 hex characters), not the
    /// client's header: scoped by tenant and policy namespace.
    pub key: String,
    /// The fencing token of this attempt.
    pub fence: u64,
    /// Which attempt under the key (1 for the first).
    pub attempt: u32,
    /// Whether an earlier attempt under the key may have had its effect.
    pub take_over: bool,
}

/// The [`IdempotencyLayer`](crate::IdempotencyLayer)'s service around the
/// handler `S`.
#[derive(Clone)]
pub struct IdempotencyService<S> {
    inner: S,
    config: Arc<Config>,
}

impl<S> std::fmt::Debug for IdempotencyService<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdempotencyService").finish_non_exhaustive()
    }
}

impl<S> IdempotencyService<S> {
    pub(crate) fn new(inner: S, config: Arc<Config>) -> Self {
        IdempotencyService { inner, config }
    }
}

impl<S, B, ResB> Service<Request<B>> for IdempotencyService<S>
where
    S: Service<Request<B>, Response = Response<ResB>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    B: Body + From<Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
    B::Data: Send,
    ResB: Body<Data = Bytes> + Send + 'static,
    ResB::Error: Into<BoxError>,
{
    type Response = Response<ResponseBody>;
    type Error = S::Error;
    type Future = Answering<S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let config = self.config.clone();
        handler::call(
            &mut self.inner,
            &self.config.methods,
            &self.config.key_header,
            request,
            |inner, request| deduplicated(config, inner, request),
        )
    }
}

/// A matching request, answered; a replay says so (`Idempotent-Replayed:
/// true`, also to a request whose key the policy derived from its body).
async fn deduplicated<S, B, ResB>(
    config: Arc<Config>,
    inner: S,
    request: Request<B>,
) -> Result<Response<ResponseBody>, S::Error>
where
    S: Inner<B, ResB>,
    B: RequestBody,
    ResB: HandlerBody,
{
    let (mut response, replayed) = answer(config, inner, request).await?;
    if replayed {
        response
            .headers_mut()
            .insert(crate::IDEMPOTENT_REPLAYED, HeaderValue::from_static("true"));
    }
    Ok(response)
}

/// Reads the body, asks the engine, then runs the handler or answers for
/// it; says whether the answer is a replay.
async fn answer<S, B, ResB>(
    config: Arc<Config>,
    inner: S,
    request: Request<B>,
) -> Result<(Response<ResponseBody>, bool), S::Error>
where
    S: Inner<B, ResB>,
    B: RequestBody,
    ResB: HandlerBody,
{
    let (parts, body) = request.into_parts();
    let body = match read_bounded(&parts.headers, body, config.body_limit).await {
        Ok(body) => body,
        Err(problem) => return Ok((problem.into_response(), false)),
    };
    let op = match operation(&config, &parts, &body) {
        Ok(op) => op,
        Err(problem) => return Ok((problem.into_response(), false)),
    };
    let begin = match config.engine.begin(&op).await {
        Ok(begin) => begin,
        Err(e) => return Ok((engine_problem(&config, e).into_response(), false)),
    };
    match begin {
        Begin::Execute(execution) => {
            let response = execute(config, inner, parts, body, execution).await?;
            Ok((response, false))
        }
        duplicate => Ok(duplicate::answer(&config, duplicate)),
    }
}

/// Runs the handler under the held claim and records how it ended, polled
/// in the request's own task: the handler and the claim's heartbeat are
/// polled together (a panic in the handler is caught), so a request spawns
/// no task of its own. A client that hangs up drops this future; the work
/// is wrapped in [`FinishOnDrop`], which then hands what is left of it to
/// a task, so neither the effect nor the record of its end is cut half
/// way. Each hand-off between tasks is a wake-up of another thread, which
/// was most of the layer's overhead when every request paid for them (see
/// `docs/benchmarks.md`).
async fn execute<S, B, ResB>(
    config: Arc<Config>,
    inner: S,
    mut parts: Parts,
    body: Bytes,
    execution: Execution,
) -> Result<Response<ResponseBody>, S::Error>
where
    S: Inner<B, ResB>,
    B: From<Bytes> + Send + 'static,
    ResB: HandlerBody,
{
    parts.extensions.insert(FencedKey {
        key: execution.key_hex(),
        fence: execution.fence(),
        attempt: execution.attempt(),
        take_over: execution.is_take_over(),
    });
    let request = Request::from_parts(parts, B::from(body));
    // Polled here; a request dropped mid-way (the client hung up) hands
    // what is left to a task of its own, so its end is still recorded.
    let work = async move {
        // A failed heartbeat (deposed) stops beating; the handler runs on,
        // and its end is then refused by the fence.
        let ended = handler::run(inner, request, heartbeat_loop(&execution)).await;
        record(&config, execution, ended).await
    };
    match FinishOnDrop::new(AssertUnwindSafe(work).catch_unwind()).await {
        Ok(answer) => answer,
        Err(_panic) => {
            tracing::error!("recording a request's end panicked");
            Ok(unknown_outcome("the task running the request failed").into_response())
        }
    }
}

/// Records the handler's end under the claim's fence and answers the
/// client with the handler's response. An end whose effect is unknown (a
/// panic, an error from the service, a body that broke off) is not
/// recorded: the claim stays until its lease ends, and then the policy
/// decides what a retry gets (never a blind re-run).
async fn record<E>(
    config: &Config,
    execution: Execution,
    ended: Ended<E>,
) -> Result<Response<ResponseBody>, E> {
    let (parts, bytes) = match ended {
        Ended::Answered(parts, bytes) => (parts, bytes),
        Ended::BodyBrokeOff(e) => {
            tracing::warn!(key = %execution.key(), error = %e, "the handler's response body broke off; its outcome is unknown");
            return Ok(unknown_outcome("the handler's response body broke off").into_response());
        }
        Ended::Failed(e) => return Err(e),
        Ended::Panicked => {
            tracing::warn!(key = %execution.key(), "the handler panicked; its outcome is unknown");
            return Ok(unknown_outcome("the handler failed").into_response());
        }
    };
    let status = parts.status;
    let ending = (config.ending)(status);
    let mut stored = stored::encode(&parts.headers, &config.replayed_headers, &bytes);
    if stored.len() > config.max_stored_bytes {
        stored = stored::not_kept(status, bytes.len(), config.max_stored_bytes);
    }
    let outcome = Outcome {
        status: i32::from(status.as_u16()),
        body: stored,
        error: matches!(ending, Ending::Failed { .. }).then(|| format!("HTTP {status}")),
    };
    let key = execution.key().clone();
    match execution.finish(ending, outcome).await {
        Ok(()) => {}
        // The handler's effect happened under this fence; downstream was
        // handed the fence and could refuse it. The client gets what the
        // handler answered; duplicates get what the store holds.
        Err(EngineError::Fenced(e)) => {
            tracing::warn!(%key, error = %e, "deposed while the handler ran: its response was not recorded")
        }
        Err(e) => {
            tracing::error!(%key, error = %e, "recording the handler's response failed; the claim stays until its lease ends")
        }
    }
    Ok(Response::from_parts(parts, full(bytes)))
}

/// A 500 for a request whose handler's outcome is unknown.
fn unknown_outcome(what: &str) -> Problem {
    Problem::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        "outcome-unknown",
        "Whether the request took effect is unknown",
        format!(
            "{what}; the key stays held until its lease ends, then the policy decides what a retry gets"
        ),
    )
}

/// The problem for an engine error before anything ran.
fn engine_problem(config: &Config, e: EngineError) -> Problem {
    match e {
        EngineError::Refused(refusal) => {
            let missing_key = refusal.code == ErrorCode::MissingField
                && refusal.field.as_deref() == Some("idempotency_key");
            let problem = if missing_key {
                Problem::new(
                    StatusCode::BAD_REQUEST,
                    "missing-idempotency-key",
                    "The request needs an Idempotency-Key header",
                    format!(
                        "the request has no `{}` header, and the policy requires one",
                        config.key_header
                    ),
                )
            } else {
                Problem::new(
                    StatusCode::BAD_REQUEST,
                    "refused-by-policy",
                    "The policy refused the request",
                    refusal.message.clone(),
                )
            };
            let problem = problem.with("code", refusal.code.as_str());
            match refusal.field {
                Some(field) => problem.with("field", field),
                None => problem,
            }
        }
        EngineError::Operation(e) => Problem::new(
            StatusCode::BAD_REQUEST,
            "invalid-request",
            "The request cannot be deduplicated",
            e.to_string(),
        ),
        EngineError::Policy(e) => {
            tracing::error!(error = %e, "the idempotency policy failed");
            Problem::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "policy-failed",
                "The idempotency policy failed",
                e.to_string(),
            )
        }
        EngineError::Unregistered(e) => {
            tracing::error!(error = %e, "the idempotency policy is not registered");
            Problem::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "policy-not-registered",
                "The idempotency policy may not write here",
                e.to_string(),
            )
        }
        EngineError::Fenced(e) | EngineError::Store(e) => {
            tracing::error!(error = %e, "the idempotency store failed");
            Problem::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "store-unavailable",
                "The idempotency store is unavailable",
                format!("the idempotency store failed: {e}"),
            )
            .retry_after_ms(1000)
        }
        // `EngineError` is non-exhaustive: an error this layer does not
        // know, before anything ran.
        e => {
            tracing::error!(error = %e, "the idempotency engine failed");
            Problem::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "engine-failed",
                "The idempotency engine failed",
                e.to_string(),
            )
        }
    }
}
