//! The handler behind either layer ([`IdempotencyLayer`](crate::IdempotencyLayer)
//! and [`GateLayer`](crate::GateLayer)): called on the service that was
//! polled ready, passed a request the layer does not handle, and run to its
//! end beside the loop that keeps the layer's hold on the key (a claim's
//! heartbeat, an admission's window), with a panic caught.
//!
//! Both layers are the same tower service around a handler and differ only
//! in what they do before and after it; what they share lives here.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::{Pin, pin};

use bytes::Bytes;
use futures_util::FutureExt;
use http::{HeaderName, HeaderValue, Method, Request, Response};
use http_body::Body;
use http_body_util::BodyExt;
use tower::Service;
use tracing::Instrument;

use crate::response_body::{BoxError, ResponseBody};

/// The future of both layers' services.
pub(crate) type Answering<E> =
    Pin<Box<dyn Future<Output = Result<Response<ResponseBody>, E>> + Send>>;

/// The service a layer wraps, as the layers' request paths need it: it
/// answers with a body of [`HandlerBody`], and it and its future and error
/// may move to another task (a request dropped mid-way finishes there).
/// Named once here; every service of that shape is one.
pub(crate) trait Inner<B, ResB>:
    Service<Request<B>, Response = Response<ResB>, Future: Send + 'static, Error: Send + 'static>
    + Send
    + 'static
{
}

impl<S, B, ResB> Inner<B, ResB> for S
where
    S: Service<Request<B>, Response = Response<ResB>> + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
}

/// A request body the layers can rebuild from the bytes they read.
pub(crate) trait RequestBody:
    Body<Error: Into<BoxError>, Data: Send> + From<Bytes> + Send + 'static
{
}

impl<B> RequestBody for B
where
    B: Body + From<Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
    B::Data: Send,
{
}

/// The body of the wrapped handler's response, read whole by the layers.
pub(crate) trait HandlerBody:
    Body<Data = Bytes, Error: Into<BoxError>> + Send + 'static
{
}

impl<ResB> HandlerBody for ResB
where
    ResB: Body<Data = Bytes> + Send + 'static,
    ResB::Error: Into<BoxError>,
{
}

/// A call on a layer's service: the inner service polled ready is the one
/// that must be called, so it is taken and a fresh clone left for the next
/// request. A request whose method is not in `methods` goes straight to it
/// (its body boxed); any other is `handle`d, in an `idem.request` span
/// (info level: method, path and the client's key, which is recorded with
/// `Debug` so that whatever bytes a client sent arrive escaped), and the
/// answer to a request carrying a key says whether it is a replay
/// (`Idempotent-Replayed: false` unless `handle` said `true`), so that a
/// client tells a fresh answer from a replay without keeping track of what
/// it sent.
pub(crate) fn call<S, B, ResB, Fut>(
    inner: &mut S,
    methods: &[Method],
    key_header: &HeaderName,
    request: Request<B>,
    handle: impl FnOnce(S, Request<B>) -> Fut,
) -> Answering<S::Error>
where
    S: Service<Request<B>, Response = Response<ResB>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    B: Send + 'static,
    ResB: Body<Data = Bytes> + Send + 'static,
    ResB::Error: Into<BoxError>,
    Fut: Future<Output = Result<Response<ResponseBody>, S::Error>> + Send + 'static,
{
    let fresh = inner.clone();
    let mut inner = std::mem::replace(inner, fresh);
    if !methods.contains(request.method()) {
        return Box::pin(async move {
            let response = inner.call(request).await?;
            Ok(response.map(|b| b.map_err(Into::into).boxed_unsync()))
        });
    }
    let client_key = request.headers().get(key_header).cloned();
    let span = tracing::info_span!(
        "idem.request",
        method = %request.method(),
        path = %request.uri().path(),
        idempotency_key = client_key.as_ref().map(tracing::field::debug),
    );
    let keyed = client_key.is_some();
    let answering = handle(inner, request);
    Box::pin(
        async move {
            let mut response = answering.await?;
            if keyed {
                response
                    .headers_mut()
                    .entry(crate::IDEMPOTENT_REPLAYED)
                    .or_insert(HeaderValue::from_static("false"));
            }
            Ok(response)
        }
        .instrument(span),
    )
}

/// How a handler's run ended.
pub(crate) enum Ended<E> {
    /// It answered: its response head and whole body.
    Answered(http::response::Parts, Bytes),
    /// Its response body broke off: whether it took effect is unknown.
    BodyBrokeOff(BoxError),
    /// The service returned its error (handed on to the server).
    Failed(E),
    /// It panicked (caught: it costs the request its answer, not the
    /// layer's bookkeeping); whether it took effect is unknown.
    Panicked,
}

/// Calls the handler with `request` and reads its whole response, a panic
/// caught; `hold` (the loop keeping the layer's hold on the key) is polled
/// beside it in the same task until it ends or the handler does. A `hold`
/// that ends (it was refused) is not polled again; the handler runs on.
pub(crate) async fn run<S, B, ResB>(
    mut inner: S,
    request: Request<B>,
    hold: impl Future<Output = ()>,
) -> Ended<S::Error>
where
    S: Service<Request<B>, Response = Response<ResB>>,
    ResB: Body<Data = Bytes>,
    ResB::Error: Into<BoxError>,
{
    let handler = AssertUnwindSafe(async move {
        let response = inner.call(request).await?;
        let (parts, body) = response.into_parts();
        let bytes: Result<Bytes, BoxError> = body
            .collect()
            .await
            .map(|c| c.to_bytes())
            .map_err(Into::into);
        Ok::<_, S::Error>((parts, bytes))
    })
    .catch_unwind();
    let mut handler = pin!(handler);
    let mut hold = pin!(hold);
    let mut holding = true;
    let ended = loop {
        tokio::select! {
            ended = &mut handler => break ended,
            () = &mut hold, if holding => holding = false,
        }
    };
    match ended {
        Ok(Ok((parts, Ok(bytes)))) => Ended::Answered(parts, bytes),
        Ok(Ok((_, Err(e)))) => Ended::BodyBrokeOff(e),
        Ok(Err(e)) => Ended::Failed(e),
        Err(_panic) => Ended::Panicked,
    }
}
