//! The connections: how many are open, how long each may take, and how they
//! end when the sidecar stops.
//!
//! A client is not trusted to be quick. Before this, one client that sent
//! its headers and then stalled kept a stopping sidecar alive for ever, and
//! idle connections held file descriptors until none were left for anyone
//! (nothing was logged). So:
//!
//! - a connection is closed when it has waited [`ConnectionLimits::idle`]
//!   for its next request, or a request's head has taken
//!   [`ConnectionLimits::header`] from its first byte — from the accept for
//!   a connection's first request, so one that never sends a byte is
//!   closed then, not after the idle timeout (no request is in flight on
//!   it either way: nothing is lost);
//! - a request's body must arrive within [`ConnectionLimits::body`] (`408`,
//!   in the handler that reads it);
//! - at most [`ConnectionLimits::max_connections`] are open: one more is
//!   answered `503` with a problem document and closed, at once;
//! - a failure to accept (the process's file limit reached) and a burst of
//!   refusals are logged when they start, and how many there were when they
//!   end, never silently;
//! - hyper's own refusals of a head it cannot parse (`400`, `431`,
//!   written before any call, with an empty body) go out as problem
//!   documents like every other refusal ([`Watched`] swaps them);
//! - on shutdown, idle connections close at once, a request whose body
//!   is still arriving is answered `503` at once (the `json` module: it
//!   reached nothing), calls in flight get
//!   [`ConnectionLimits::drain`] to finish, and what is still running then
//!   is cut; the caller learns how many were cut ([`Drained`]).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tower::ServiceExt;

use crate::problem::Problem;

/// How long connections may take, how many may be open, and how long a
/// shutdown waits. Every field has a flag on `idem serve`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// From a request's first byte to the end of its head.
    pub header: Duration,
    /// A connection waiting for its (next) request, with nothing sent.
    pub idle: Duration,
    /// Reading a request's whole body, from the end of its head.
    pub body: Duration,
    /// Connections open at once; one more is answered `503` and closed.
    pub max_connections: usize,
    /// On shutdown, how long calls in flight get to finish.
    pub drain: Duration,
}

/// How many descriptors the sidecar keeps for itself when it sizes the
/// default connection cap from the process's file limit: the store's
/// connections and files, the policy cache, the listener, stdio.
const RESERVED_DESCRIPTORS: u64 = 64;

/// The largest request head (request line and headers) read: the API's
/// heads are a few hundred bytes, and every open connection may hold this
/// much (hyper's default, ~400 KiB, times the connection cap would be
/// 400 MiB). Past it: `431`.
pub const MAX_HEAD_BYTES: usize = 64 * 1024;

/// The default cap on connections, before the file limit lowers it.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            header: Duration::from_secs(10),
            idle: Duration::from_secs(60),
            body: Duration::from_secs(30),
            max_connections: default_max_connections(),
            drain: Duration::from_secs(10),
        }
    }
}

/// [`DEFAULT_MAX_CONNECTIONS`], or fewer when the process's open-file limit
/// would run out first (keeping [`RESERVED_DESCRIPTORS`] for the rest), so
/// that a flood meets a `503`, not a failing `accept`.
pub fn default_max_connections() -> usize {
    let cap = DEFAULT_MAX_CONNECTIONS as u64;
    match rustix::process::getrlimit(rustix::process::Resource::Nofile).current {
        Some(limit) => limit.saturating_sub(RESERVED_DESCRIPTORS).clamp(1, cap) as usize,
        None => DEFAULT_MAX_CONNECTIONS,
    }
}

/// How a shutdown went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Drained {
    /// Calls still running at the drain deadline, cut without an answer.
    pub cut: usize,
}

impl Drained {
    /// Whether every call in flight finished.
    pub fn is_clean(&self) -> bool {
        self.cut == 0
    }
}

/// Serves `router` on `listener` within `limits` until `shutdown` resolves,
/// then tells `stop` and drains.
pub(crate) async fn serve(
    listener: TcpListener,
    router: Router,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()>,
    stop: watch::Sender<bool>,
) -> Drained {
    let stopping = stop.subscribe();
    let permits = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let in_flight = Arc::new(AtomicUsize::new(0));
    let mut connections = JoinSet::new();
    let mut accept_failures = Burst::new("accepting a connection failed");
    let mut over_cap = Burst::new("refused a connection over --max-connections");
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    accept_failures.end();
                    match permits.clone().try_acquire_owned() {
                        Ok(permit) => {
                            over_cap.end();
                            let _ = stream.set_nodelay(true);
                            connections.spawn(connection(
                                stream,
                                router.clone(),
                                limits,
                                Arc::clone(&in_flight),
                                stopping.clone(),
                                permit,
                            ));
                        }
                        Err(_) => {
                            over_cap.note(|| format!(
                                "{} connections are open; answering 503 until one closes",
                                limits.max_connections
                            ));
                            connections.spawn(refuse(stream, limits.max_connections));
                        }
                    }
                }
                // Out of descriptors (or memory): the connection waits in the
                // listen backlog; try again shortly rather than spin.
                Err(e) => {
                    accept_failures.note(|| format!("{e}; connections wait in the backlog"));
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }
    drop(listener);
    accept_failures.end();
    over_cap.end();
    let _ = stop.send(true);
    let deadline = Instant::now() + limits.drain;
    loop {
        match tokio::time::timeout_at(deadline, connections.join_next()).await {
            Ok(Some(_)) => {}
            Ok(None) => return Drained { cut: 0 },
            Err(_) => {
                let cut = in_flight.load(Ordering::SeqCst);
                connections.shutdown().await;
                return Drained { cut };
            }
        }
    }
}

/// One connection, until its client closes it, a timeout closes it, or the
/// sidecar stops.
async fn connection(
    stream: TcpStream,
    router: Router,
    limits: ConnectionLimits,
    in_flight: Arc<AtomicUsize>,
    mut stopping: watch::Receiver<bool>,
    _permit: OwnedSemaphorePermit,
) {
    let activity = Arc::new(Activity::new());
    let io = TokioIo::new(Watched {
        inner: Some(stream),
        activity: Arc::clone(&activity),
        swapping: None,
        refused: false,
    });
    let service = {
        let activity = Arc::clone(&activity);
        hyper::service::service_fn(move |request: http::Request<Incoming>| {
            let call = Call::start(&activity, &in_flight);
            let answer = router.clone().oneshot(request);
            async move {
                let answer = answer.await;
                drop(call);
                answer
            }
        })
    };
    let conn = hyper::server::conn::http1::Builder::new()
        .max_buf_size(MAX_HEAD_BYTES)
        .serve_connection(io, service);
    tokio::pin!(conn);
    // One timer, reset only when it fires: a phase change wakes no one (a
    // request would otherwise pay a timer insertion per phase). It never
    // looks further ahead than the shorter timeout, so a head that starts
    // while it sleeps is still checked in time.
    let step = limits.header.min(limits.idle);
    let timer = tokio::time::sleep(step);
    tokio::pin!(timer);
    let mut draining = false;
    loop {
        tokio::select! {
            ended = conn.as_mut() => {
                if let Err(e) = ended {
                    tracing::debug!(error = %e, "a connection ended with an error");
                }
                return;
            }
            () = timer.as_mut() => {
                let now = Instant::now();
                match activity.deadline(&limits) {
                    Some(deadline) if deadline <= now => {
                        tracing::debug!("closing a connection that sent no request in time");
                        return;
                    }
                    Some(deadline) => timer.as_mut().reset(deadline.min(now + step)),
                    None => timer.as_mut().reset(now + step),
                }
            }
            _ = stopping.changed(), if !draining => {
                draining = true;
                conn.as_mut().graceful_shutdown();
                if !activity.busy() {
                    // Nothing in flight on it: closing loses nothing.
                    return;
                }
            }
        }
    }
}

/// Answers a connection over the cap `503` with a problem document, and
/// closes it (a client that does not read gets a second, then is dropped;
/// one that goes on sending is read for a while, see [`linger`]).
async fn refuse(mut stream: TcpStream, max: usize) {
    let problem = Problem::new(
        http::StatusCode::SERVICE_UNAVAILABLE,
        "too-many-connections",
        "Too many connections",
        format!("the sidecar has {max} connections open, its limit (--max-connections); try again shortly"),
    )
    .retry_after_ms(1000)
    .to_json()
    .to_string();
    let reply = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/problem+json\r\nretry-after: 1\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{problem}",
        problem.len()
    );
    let written = tokio::time::timeout(Duration::from_secs(1), stream.write_all(reply.as_bytes()));
    if let Ok(Ok(())) = written.await {
        linger(stream).await;
    }
}

/// Where a connection is: waiting for a request, reading one's head, or
/// running calls.
#[derive(Debug, Clone, Copy)]
enum Phase {
    Idle { since: Instant },
    Head { since: Instant },
    Busy { calls: usize },
}

/// A connection's phase, shared by its reader, its calls and its timer
/// (which reads it when it fires; nothing is woken when it changes).
struct Activity {
    phase: Mutex<Phase>,
    /// Whether anything was written since the current head began: an
    /// answer still being flushed is not hyper's own refusal.
    written: std::sync::atomic::AtomicBool,
}

impl Activity {
    /// A connection just accepted: its first head is due within the
    /// header timeout, whether or not a byte of it has come.
    fn new() -> Self {
        Activity {
            phase: Mutex::new(Phase::Head {
                since: Instant::now(),
            }),
            written: std::sync::atomic::AtomicBool::new(false),
        }
    }

    fn phase(&self) -> std::sync::MutexGuard<'_, Phase> {
        self.phase.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Bytes arrived: an idle connection starts a request's head.
    fn read_some(&self) {
        let mut phase = self.phase();
        if let Phase::Idle { .. } = *phase {
            *phase = Phase::Head {
                since: Instant::now(),
            };
            self.written.store(false, Ordering::SeqCst);
        }
    }

    fn busy(&self) -> bool {
        matches!(*self.phase(), Phase::Busy { .. })
    }

    /// Whether `bytes`, about to be written, are hyper's own refusal of the
    /// head being read: a head with no body, status 400 or 431, the
    /// first bytes written since this head began, with no call started.
    fn automatic_refusal(&self, bytes: &[u8]) -> Option<u16> {
        if !matches!(*self.phase(), Phase::Head { .. }) || self.written.load(Ordering::SeqCst) {
            return None;
        }
        let status = match bytes.get(..13)? {
            // (hyper's 414 needs a target past 64 KiB: the head limit,
            // `MAX_HEAD_BYTES`, answers 431 first.)
            b"HTTP/1.1 400 " => 400,
            b"HTTP/1.1 431 " => 431,
            _ => return None,
        };
        let head = std::str::from_utf8(bytes).ok()?;
        let empty = head
            .strip_suffix("\r\n\r\n")?
            .split("\r\n")
            .any(|line| line.eq_ignore_ascii_case("content-length: 0"));
        empty.then_some(status)
    }

    /// When this connection is to be closed if nothing changes; `None`
    /// while a call runs.
    fn deadline(&self, limits: &ConnectionLimits) -> Option<Instant> {
        match *self.phase() {
            Phase::Idle { since } => Some(since + limits.idle),
            Phase::Head { since } => Some(since + limits.header),
            Phase::Busy { .. } => None,
        }
    }
}

/// A call running on a connection, from its head to its answer (or to its
/// being dropped, if the connection is cut).
struct Call {
    activity: Arc<Activity>,
    in_flight: Arc<AtomicUsize>,
}

impl Call {
    fn start(activity: &Arc<Activity>, in_flight: &Arc<AtomicUsize>) -> Call {
        {
            let mut phase = activity.phase();
            *phase = match *phase {
                Phase::Busy { calls } => Phase::Busy { calls: calls + 1 },
                _ => Phase::Busy { calls: 1 },
            };
        }
        in_flight.fetch_add(1, Ordering::SeqCst);
        Call {
            activity: Arc::clone(activity),
            in_flight: Arc::clone(in_flight),
        }
    }
}

impl Drop for Call {
    fn drop(&mut self) {
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        let mut phase = self.activity.phase();
        *phase = match *phase {
            Phase::Busy { calls } if calls > 1 => Phase::Busy { calls: calls - 1 },
            _ => Phase::Idle {
                since: Instant::now(),
            },
        };
    }
}

/// The socket, telling its [`Activity`] when bytes arrive, and swapping
/// hyper's bodiless refusals of an unparsable head for problem documents
/// (hyper writes those itself, with no hook to shape them).
struct Watched {
    /// The socket; taken only when dropped after a refusal, to linger.
    inner: Option<TcpStream>,
    activity: Arc<Activity>,
    /// A problem document being written in place of hyper's refusal: the
    /// bytes, how many are written, and the length hyper asked to write.
    swapping: Option<(Vec<u8>, usize, usize)>,
    /// Whether a refusal was written: the client may still be sending.
    refused: bool,
}

impl Watched {
    fn stream(&mut self) -> Pin<&mut TcpStream> {
        Pin::new(
            self.inner
                .as_mut()
                .expect("the socket is there until dropped"),
        )
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        if self.refused
            && let Some(stream) = self.inner.take()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            runtime.spawn(linger(stream));
        }
    }
}

/// How long, and for how many bytes, a refused client's remaining request
/// is read and discarded before the socket closes.
const LINGER: (Duration, usize) = (Duration::from_secs(2), 1 << 20);

/// Closes a socket whose client may still be sending a refused request: a
/// close with its bytes unread would reset the connection, and a reset can
/// destroy the refusal before the client reads it. So: end our side, read
/// and discard what still comes (for a while, up to a bound), then close.
async fn linger(mut stream: TcpStream) {
    use tokio::io::AsyncReadExt;
    let _ = stream.shutdown().await;
    let (time, bytes) = LINGER;
    let _ = tokio::time::timeout(time, async {
        let mut buf = [0u8; 16 * 1024];
        let mut read = 0;
        while read < bytes {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => read += n,
            }
        }
    })
    .await;
}

/// hyper's refusal `status` as a problem document; the connection closes.
fn refusal_reply(status: u16) -> Vec<u8> {
    let (code, slug, title, detail) = match status {
        431 => (
            http::StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "headers-too-large",
            "The request's head is too large",
            "the request's line and headers are larger than 64 KiB (or there are too many headers)",
        ),
        _ => (
            http::StatusCode::BAD_REQUEST,
            "malformed-request",
            "The request is not valid HTTP/1.1",
            "the request line or a header could not be parsed, or its framing is ambiguous (two different Content-Length headers, say): send one valid HTTP/1.1 request",
        ),
    };
    let problem = Problem::new(code, slug, title, detail)
        .to_json()
        .to_string();
    format!(
        "HTTP/1.1 {} {}\r\ncontent-type: application/problem+json\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{problem}",
        code.as_u16(),
        code.canonical_reason().unwrap_or(""),
        problem.len()
    )
    .into_bytes()
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = self.stream().poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.read_some();
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        if this.swapping.is_none() {
            if let Some(status) = this.activity.automatic_refusal(buf) {
                this.swapping = Some((refusal_reply(status), 0, buf.len()));
            } else {
                this.activity.written.store(true, Ordering::SeqCst);
                return this.stream().poll_write(cx, buf);
            }
        }
        // hyper asks again with the same bytes until told they are written:
        // they are, once the whole problem document is.
        let (reply, mut done, asked) = this.swapping.take().expect("set above");
        while done < reply.len() {
            match this.stream().poll_write(cx, &reply[done..]) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(n)) => done += n,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => {
                    this.swapping = Some((reply, done, asked));
                    return Poll::Pending;
                }
            }
        }
        this.refused = true;
        this.activity.written.store(true, Ordering::SeqCst);
        Poll::Ready(Ok(asked))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.stream().poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.stream().poll_shutdown(cx)
    }

    // Not vectored: hyper then hands over each answer as one buffer, which
    // is what a refusal is recognised in (answers are small JSON).
    fn is_write_vectored(&self) -> bool {
        false
    }
}

/// A run of like events (failed accepts, refusals over the cap), logged
/// when it starts and, with its count, when it ends.
struct Burst {
    what: &'static str,
    count: u64,
    started: Option<Instant>,
}

impl Burst {
    fn new(what: &'static str) -> Self {
        Burst {
            what,
            count: 0,
            started: None,
        }
    }

    fn note(&mut self, detail: impl FnOnce() -> String) {
        if self.started.is_none() {
            self.started = Some(Instant::now());
            tracing::warn!("{}: {}", self.what, detail());
        }
        self.count += 1;
    }

    fn end(&mut self) {
        if let Some(started) = self.started.take() {
            tracing::warn!(
                "{} {} time(s) in {:.1} s",
                self.what,
                self.count,
                started.elapsed().as_secs_f64()
            );
            self.count = 0;
        }
    }
}
