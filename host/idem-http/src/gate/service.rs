//! The service a [`GateLayer`](super::GateLayer) wraps around a handler:
//! one request through the gate.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures_util::FutureExt;
use http::request::Parts;
use http::{HeaderValue, Request, Response, StatusCode};
use http_body::Body;
use idem::store::{Admission, GateRequest, GateTicket, MAX_GATE_KEY_BYTES, StoreError};
use sha2::{Digest, Sha256};
use tower::Service;

use super::{GateConfig, GateEnd};
use crate::finish_on_drop::FinishOnDrop;
use crate::handler::{self, Answering, Ended, HandlerBody, Inner, RequestBody};
use crate::problem::Problem;
use crate::request_body::read_bounded;
use crate::response_body::{BoxError, ResponseBody, full};
use crate::stored;

/// The admission a request holds while its handler runs, handed to the
/// handler as a request extension.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GateAdmission {
    /// The key, as the holder sent it.
    pub key: String,
    /// The holder's fence.
    pub fence: u64,
    /// Which admission of the key this is (1 for the first).
    pub admission: u64,
    /// The fence of an earlier admission whose window ran out with nothing
    /// recorded (its process stopped mid-way): its effect may have been
    /// applied, so look in the downstream's own records before applying
    /// again. `None` when no admission lapsed.
    pub lapsed: Option<u64>,
}

/// The [`GateLayer`](super::GateLayer)'s service around the handler `S`.
#[derive(Clone)]
pub struct GateService<S> {
    inner: S,
    config: Arc<GateConfig>,
}

impl<S> std::fmt::Debug for GateService<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GateService").finish_non_exhaustive()
    }
}

impl<S> GateService<S> {
    pub(crate) fn new(inner: S, config: Arc<GateConfig>) -> Self {
        GateService { inner, config }
    }
}

impl<S, B, ResB> Service<Request<B>> for GateService<S>
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
            |inner, request| gated(config, inner, request),
        )
    }
}

/// A matching request: its key and fence, its body, the gate's answer.
async fn gated<S, B, ResB>(
    config: Arc<GateConfig>,
    inner: S,
    request: Request<B>,
) -> Result<Response<ResponseBody>, S::Error>
where
    S: Inner<B, ResB>,
    B: RequestBody,
    ResB: HandlerBody,
{
    let (parts, body) = request.into_parts();
    let (key, fence) = match key_and_fence(&config, &parts) {
        Ok(held) => held,
        Err(problem) => return Ok(problem.into_response()),
    };
    let body = match read_bounded(&parts.headers, body, config.body_limit).await {
        Ok(body) => body,
        Err(problem) => return Ok(problem.into_response()),
    };
    let request = GateRequest {
        gate: config.gate.clone(),
        key,
        fence,
        fingerprint: Some(fingerprint(&parts, &body)),
        window: config.window,
    };
    let answer = match config.gates.admit(&request).await {
        Ok(answer) => answer,
        Err(e) => return Ok(store_problem(&e).into_response()),
    };
    let problem = match answer {
        Admission::Admitted { ticket, lapsed } => {
            return run(config, inner, parts, body, ticket, lapsed).await;
        }
        Admission::Replay { result, .. } => return Ok(replay(&result)),
        Admission::Stale { highest } => Problem::new(
            StatusCode::CONFLICT,
            "stale-fence",
            "The fence is lower than one already seen for this key",
            format!(
                "fence {fence} is lower than fence {highest}, already seen for this key: \
                 its holder was deposed, and nothing was applied"
            ),
        )
        .with("fence", fence)
        .with("highest_fence", highest),
        Admission::Busy {
            in_flight,
            retry_after_ms,
        } => Problem::new(
            StatusCode::CONFLICT,
            "request-in-flight",
            "A request with this key is still being applied",
            format!("the request admitted under fence {in_flight} has not ended yet"),
        )
        .with("in_flight_fence", in_flight)
        .retry_after_ms(retry_after_ms),
        Admission::Mismatch => Problem::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "key-reused",
            "The key was used for a different request",
            "this key was first admitted for another method, path or body",
        ),
    };
    Ok(problem.into_response())
}

/// The key and fence headers, or the `400` naming what is wrong.
fn key_and_fence(config: &GateConfig, parts: &Parts) -> Result<(String, u64), Problem> {
    let header = |name: &http::HeaderName| parts.headers.get(name).map(HeaderValue::to_str);
    let key = match header(&config.key_header) {
        None => {
            return Err(Problem::new(
                StatusCode::BAD_REQUEST,
                "missing-idempotency-key",
                "The request needs an Idempotency-Key header",
                format!("the request has no `{}` header", config.key_header),
            ));
        }
        Some(Ok(key)) if !key.is_empty() && key.len() <= MAX_GATE_KEY_BYTES => key.to_string(),
        Some(_) => {
            return Err(Problem::new(
                StatusCode::BAD_REQUEST,
                "invalid-idempotency-key",
                "The Idempotency-Key header is not a key",
                format!(
                    "the `{}` header must be visible ASCII, 1 to {MAX_GATE_KEY_BYTES} bytes",
                    config.key_header
                ),
            ));
        }
    };
    let fence = match header(&config.fence_header) {
        None => {
            return Err(Problem::new(
                StatusCode::BAD_REQUEST,
                "missing-fence",
                "The request needs a fence header",
                format!(
                    "the request has no `{}` header (the holder's fencing token)",
                    config.fence_header
                ),
            ));
        }
        Some(value) => value.ok().and_then(|v| v.trim().parse::<u64>().ok()),
    };
    match fence.filter(|f| *f <= i64::MAX as u64) {
        Some(fence) => Ok((key, fence)),
        None => Err(Problem::new(
            StatusCode::BAD_REQUEST,
            "invalid-fence",
            "The fence header is not a fence",
            format!(
                "the `{}` header must be a whole number from 0 to {}",
                config.fence_header,
                i64::MAX
            ),
        )),
    }
}

/// What the request asks for: its method, path (with the query) and body.
fn fingerprint(parts: &Parts, body: &[u8]) -> Vec<u8> {
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let mut hash = Sha256::new();
    hash.update(parts.method.as_str().as_bytes());
    hash.update(b"\n");
    hash.update(path.as_bytes());
    hash.update(b"\n");
    hash.update(body);
    hash.finalize().to_vec()
}

/// Runs the handler under the admission, extending its window meanwhile,
/// and stores its response or releases the key. Polled in the request's
/// own task; a client that hangs up hands what is left to a task of its
/// own ([`FinishOnDrop`]), so the end is still kept.
async fn run<S, B, ResB>(
    config: Arc<GateConfig>,
    inner: S,
    mut parts: Parts,
    body: Bytes,
    ticket: GateTicket,
    lapsed: Option<u64>,
) -> Result<Response<ResponseBody>, S::Error>
where
    S: Inner<B, ResB>,
    B: From<Bytes> + Send + 'static,
    ResB: HandlerBody,
{
    parts.extensions.insert(GateAdmission {
        key: ticket.key.clone(),
        fence: ticket.fence,
        admission: ticket.admission,
        lapsed,
    });
    let request = Request::from_parts(parts, B::from(body));
    let work = async move {
        let ended = handler::run(inner, request, extend_loop(&config, &ticket)).await;
        let (parts, bytes) = match ended {
            Ended::Answered(parts, bytes) => (parts, bytes),
            Ended::BodyBrokeOff(e) => {
                tracing::warn!(key = %ticket.key, error = %e, "the gated handler's body broke off; the key stays in flight until its window ends");
                return Ok(unknown("the handler's response body broke off").into_response());
            }
            Ended::Failed(e) => return Err(e),
            Ended::Panicked => {
                tracing::warn!(key = %ticket.key, "the gated handler panicked; the key stays in flight until its window ends");
                return Ok(unknown("the handler failed").into_response());
            }
        };
        keep(&config, &ticket, &parts, &bytes).await;
        Ok(Response::from_parts(parts, full(bytes)))
    };
    match FinishOnDrop::new(AssertUnwindSafe(work).catch_unwind()).await {
        Ok(answer) => answer,
        Err(_panic) => Ok(unknown("the task running the request failed").into_response()),
    }
}

/// Extends the admission's window every third of it, for as long as it is
/// polled; ends once the gate refuses, which only a lapsed admission gets.
async fn extend_loop(config: &GateConfig, ticket: &GateTicket) {
    let every = (config.window / 3).max(Duration::from_millis(10));
    loop {
        tokio::time::sleep(every).await;
        if let Err(e) = config.gates.extend(ticket, config.window).await
            && e.is_conflict()
        {
            tracing::warn!(key = %ticket.key, error = %e, "the gate gave up on this admission while its handler ran");
            return;
        }
    }
}

/// Stores the response, or releases the key, as the layer's ending says.
async fn keep(
    config: &GateConfig,
    ticket: &GateTicket,
    parts: &http::response::Parts,
    body: &Bytes,
) {
    let kept = match (config.ending)(parts.status) {
        GateEnd::Store => {
            let result = encode(config, parts, body);
            config.gates.record(ticket, result).await
        }
        GateEnd::Release => config.gates.release(ticket).await,
    };
    if let Err(e) = kept {
        tracing::error!(key = %ticket.key, fence = ticket.fence, error = %e, "the gate could not keep the handler's end; a repeat of the key waits for its window");
    }
}

/// A response as the gate stores it: its status on the first line, then
/// the stored form of the idempotency layer (the replayed headers and the
/// body). A response larger than the limit keeps its status and a problem
/// saying so.
fn encode(config: &GateConfig, parts: &http::response::Parts, body: &Bytes) -> Vec<u8> {
    let mut out = format!("{}\n", parts.status.as_u16()).into_bytes();
    let kept = stored::encode(&parts.headers, &config.replayed_headers, body);
    if kept.len() <= config.max_stored_bytes {
        out.extend_from_slice(&kept);
        return out;
    }
    out.extend_from_slice(&stored::not_kept(
        parts.status,
        body.len(),
        config.max_stored_bytes,
    ));
    out
}

/// A stored response, replayed with `Idempotent-Replayed: true`.
fn replay(result: &[u8]) -> Response<ResponseBody> {
    let decoded = result.iter().position(|&b| b == b'\n').and_then(|end| {
        let status = std::str::from_utf8(&result[..end]).ok()?.parse().ok()?;
        let status = StatusCode::from_u16(status).ok()?;
        Some((status, stored::decode(&result[end + 1..]).ok()?))
    });
    let Some((status, (headers, body))) = decoded else {
        return Problem::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "stored-outcome-unreadable",
            "The stored response cannot be replayed",
            "the result stored under this key is not a response this gate stored",
        )
        .into_response();
    };
    stored::replayed(status, headers, body)
}

/// A 500 for a handler whose end is unknown: the key stays in flight.
fn unknown(what: &str) -> Problem {
    Problem::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        "outcome-unknown",
        "Whether the request took effect is unknown",
        format!("{what}; the key stays in flight until its window ends"),
    )
}

/// The gate's store failing: `503`, come back.
fn store_problem(e: &StoreError) -> Problem {
    if matches!(e, StoreError::InvalidRequest(_)) {
        return Problem::new(
            StatusCode::BAD_REQUEST,
            "invalid-request",
            "The request cannot pass the gate",
            e.to_string(),
        );
    }
    tracing::error!(error = %e, "the gate's store failed");
    Problem::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "store-unavailable",
        "The gate's store is unavailable",
        format!("the gate's store failed: {e}"),
    )
    .retry_after_ms(1000)
}
