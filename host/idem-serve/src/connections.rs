//! The connections: how many are open, how long each may take, and how they
//! end when the sidecar stops. hyper's `http1::Builder` serves each one
//! (parsing, keep-alive, the head's bound) and hyper-util's
//! `GracefulShutdown` tells them to finish and close; what no maintained
//! piece does is here, each for the reason given.
//!
//! - **Timeouts.** A connection is closed when it has waited
//!   [`ConnectionLimits::idle`] for its next request, or a request's head
//!   has taken [`ConnectionLimits::header`] from its first byte (from the
//!   accept for a connection's first request); no request is in flight on
//!   it either way. hyper's `header_read_timeout` starts when hyper waits
//!   for a head, on a kept-alive connection as soon as the last answer is
//!   written: it bounds idle and head together, and cannot keep a minute
//!   of idle apart from ten seconds of head. So [`Watched`] sees a head's
//!   first byte and ends a read or write past the phase's deadline.
//!   (tower's `Timeout` bounds a whole call, which only the drain deadline
//!   does here. A body's timeout, [`ConnectionLimits::body`], is a
//!   `tokio::time::timeout` where the `json` module reads it, answering
//!   `408` with a problem document: tower-http's `RequestBodyTimeout`
//!   would add a crate and still need that answer shaped.)
//! - **The cap.** At most [`ConnectionLimits::max_connections`] are open:
//!   one more is answered `503` with a problem document and closed, at
//!   once. tower's `ConcurrencyLimit` and `LoadShed` count calls, not the
//!   idle connections that hold the descriptors, and hyper caps nothing: a
//!   semaphore at the accept does.
//! - **Logging.** A failure to accept (the process's file limit reached)
//!   and a burst of refusals are logged when they start, and with their
//!   count when they end, never silently ([`Burst`]).
//! - **hyper's own refusals** of a head it cannot parse (`400`, `431`) go
//!   out as problem documents like every other refusal. hyper writes them
//!   bodiless with no hook to shape them: [`Watched`] recognises and drops
//!   those bytes, and the document is written when hyper lets the socket
//!   go.
//! - **Shutdown.** Idle connections close at once, a request whose body is
//!   still arriving is answered `503` at once (the `json` module: it
//!   reached nothing), calls in flight get [`ConnectionLimits::drain`] to
//!   finish, and what still runs then is cut; the caller learns how many
//!   ([`Drained`]). hyper's graceful shutdown would let a first head still
//!   arriving run to its timeout, and `GracefulShutdown::shutdown` has no
//!   deadline: dropping a connection with no call in flight, the deadline
//!   and the count of calls cut are here.
//!
//! hyper-util's `conn::auto` (HTTP/1 or HTTP/2) is not used: the sidecar
//! speaks HTTP/1.1, whose timers these are.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
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
const MAX_HEAD_BYTES: usize = 64 * 1024;

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
    let permits = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let in_flight = Arc::new(AtomicUsize::new(0));
    let graceful = GracefulShutdown::new();
    // Every task, to reap the ended ones and abort the rest at the deadline.
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
                                graceful.watcher(),
                                stop.subscribe(),
                                permit,
                            ));
                        }
                        Err(_) => {
                            over_cap.note(|| format!(
                                "{} connections are open; answering 503 until one closes",
                                limits.max_connections
                            ));
                            connections.spawn(reply_and_close(stream, over_cap_reply(limits)));
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
    let cut = match tokio::time::timeout(limits.drain, graceful.shutdown()).await {
        Ok(()) => 0,
        Err(_) => in_flight.load(Ordering::SeqCst),
    };
    connections.shutdown().await;
    Drained { cut }
}

/// One connection, until its client closes it, a timeout closes it, or the
/// sidecar stops (`stopping`: dropped at once if no call runs on it; else
/// hyper finishes the call and closes, told by `watcher`).
async fn connection(
    stream: TcpStream,
    router: Router,
    limits: ConnectionLimits,
    in_flight: Arc<AtomicUsize>,
    watcher: Watcher,
    mut stopping: watch::Receiver<bool>,
    _permit: OwnedSemaphorePermit,
) {
    let activity = Arc::new(Activity::new());
    let io = TokioIo::new(Watched {
        inner: Some(stream),
        activity: Arc::clone(&activity),
        limits,
        timer: Box::pin(tokio::time::sleep(Duration::ZERO)),
        refused: None,
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
    let conn = watcher.watch(
        hyper::server::conn::http1::Builder::new()
            .max_buf_size(MAX_HEAD_BYTES)
            // Heads are timed by `Watched` (see the module's docs).
            .header_read_timeout(None)
            .serve_connection(io, service),
    );
    tokio::pin!(conn);
    let ended = tokio::select! {
        ended = conn.as_mut() => ended,
        () = crate::json::stopped(&mut stopping) => {
            if !activity.busy() {
                // Nothing in flight on it: closing loses nothing.
                return;
            }
            conn.await
        }
    };
    if let Err(e) = ended {
        tracing::debug!(error = %e, "a connection ended with an error");
    }
}

/// The answer to a connection over the cap: `503`, come back in a second.
fn over_cap_reply(limits: ConnectionLimits) -> Vec<u8> {
    let max = limits.max_connections;
    raw_reply(&Problem::new(
        http::StatusCode::SERVICE_UNAVAILABLE,
        "too-many-connections",
        "Too many connections",
        format!("the sidecar has {max} connections open, its limit (--max-connections); try again shortly"),
    )
    .retry_after_ms(1000))
}

/// hyper's refusal `status` as a problem document.
fn refusal_reply(status: u16) -> Vec<u8> {
    raw_reply(&match status {
        431 => Problem::new(
            http::StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "headers-too-large",
            "The request's head is too large",
            "the request's line and headers are larger than 64 KiB (or there are too many headers)",
        ),
        _ => Problem::new(
            http::StatusCode::BAD_REQUEST,
            "malformed-request",
            "The request is not valid HTTP/1.1",
            "the request line or a header could not be parsed, or its framing is ambiguous (two different Content-Length headers, say): send one valid HTTP/1.1 request",
        ),
    })
}

/// `problem` as a whole HTTP/1.1 answer that closes the connection, for a
/// socket no HTTP server is writing to.
fn raw_reply(problem: &Problem) -> Vec<u8> {
    let body = problem.to_json().to_string();
    let retry = match problem.retry_after_s {
        Some(s) => format!("retry-after: {s}\r\n"),
        None => String::new(),
    };
    format!(
        "HTTP/1.1 {} {}\r\ncontent-type: application/problem+json\r\n{retry}connection: close\r\ncontent-length: {}\r\n\r\n{body}",
        problem.status.as_u16(),
        problem.status.canonical_reason().unwrap_or(""),
        body.len()
    )
    .into_bytes()
}

/// How long, and for how many bytes, a refused client's remaining request
/// is read and discarded before the socket closes.
const LINGER: (Duration, usize) = (Duration::from_secs(2), 1 << 20);

/// Writes `reply` (a client that does not read gets a second) and closes
/// the socket. The client may still be sending a refused request: a close
/// with its bytes unread would reset the connection, and a reset can
/// destroy the reply before the client reads it. So: end our side, read
/// and discard what still comes (for a while, up to a bound), then close.
async fn reply_and_close(mut stream: TcpStream, reply: Vec<u8>) {
    let written = tokio::time::timeout(Duration::from_secs(1), stream.write_all(&reply));
    if !matches!(written.await, Ok(Ok(()))) {
        return;
    }
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

/// Where a connection is: waiting for a request, reading one's head, or
/// running a call (hyper's HTTP/1 runs one at a time on a connection).
#[derive(Debug, Clone, Copy)]
enum Phase {
    Idle { since: Instant },
    Head { since: Instant },
    Busy,
}

/// A connection's phase, shared by its reader, its calls and its timer
/// (which reads it when it fires; nothing is woken when it changes).
struct Activity {
    phase: Mutex<Phase>,
    /// Whether anything was written since the current head began: an
    /// answer still being flushed is not hyper's own refusal.
    written: AtomicBool,
}

impl Activity {
    /// A connection just accepted: its first head is due within the
    /// header timeout, whether or not a byte of it has come.
    fn new() -> Self {
        Activity {
            phase: Mutex::new(Phase::Head {
                since: Instant::now(),
            }),
            written: AtomicBool::new(false),
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
        matches!(*self.phase(), Phase::Busy)
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
            Phase::Busy => None,
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
        *activity.phase() = Phase::Busy;
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
        *self.activity.phase() = Phase::Idle {
            since: Instant::now(),
        };
    }
}

/// The socket, telling its [`Activity`] when bytes arrive, and holding
/// back hyper's bodiless refusal of an unparsable head: its problem
/// document is written when hyper drops the socket.
struct Watched {
    /// The socket; taken when dropped after a refusal, to answer it.
    inner: Option<TcpStream>,
    activity: Arc<Activity>,
    limits: ConnectionLimits,
    /// When the phase's deadline is next checked.
    timer: Pin<Box<tokio::time::Sleep>>,
    /// The status of hyper's refusal, once it tried to write one.
    refused: Option<u16>,
}

impl Watched {
    fn stream(&mut self) -> Pin<&mut TcpStream> {
        Pin::new(
            self.inner
                .as_mut()
                .expect("the socket is there until dropped"),
        )
    }

    /// Whether the phase's deadline has passed, asked when the socket has
    /// nothing to give or take. The timer is reset only when it fires: a
    /// phase change arms nothing (a request would otherwise pay a timer
    /// insertion per phase). It never looks further ahead than the shorter
    /// timeout, so a head that starts while it sleeps is still checked in
    /// time.
    fn expired(&mut self, cx: &mut Context<'_>) -> bool {
        let step = self.limits.header.min(self.limits.idle);
        while self.timer.as_mut().poll(cx).is_ready() {
            let now = Instant::now();
            match self.activity.deadline(&self.limits) {
                Some(deadline) if deadline <= now => return true,
                Some(deadline) => self.timer.as_mut().reset(deadline.min(now + step)),
                None => self.timer.as_mut().reset(now + step),
            }
        }
        false
    }
}

/// The error that ends a connection past its deadline (hyper closes it).
fn timed_out() -> Poll<io::Result<()>> {
    tracing::debug!("closing a connection past its idle or header timeout");
    Poll::Ready(Err(io::ErrorKind::TimedOut.into()))
}

impl Drop for Watched {
    fn drop(&mut self) {
        if let Some(status) = self.refused
            && let Some(stream) = self.inner.take()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            runtime.spawn(reply_and_close(stream, refusal_reply(status)));
        }
    }
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = self.stream().poll_read(cx, buf);
        match polled {
            Poll::Ready(Ok(())) if buf.filled().len() > before => self.activity.read_some(),
            Poll::Pending if self.expired(cx) => return timed_out(),
            _ => {}
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
        if self.refused.is_none() {
            self.refused = self.activity.automatic_refusal(buf);
        }
        if self.refused.is_some() {
            // After its refusal hyper only ends the connection; the socket
            // is answered when dropped.
            return Poll::Ready(Ok(buf.len()));
        }
        self.activity.written.store(true, Ordering::SeqCst);
        // An answer its client does not read is cut once the connection's
        // idle time has passed, as the connection would be.
        let polled = self.stream().poll_write(cx, buf);
        if polled.is_pending() && self.expired(cx) {
            return timed_out().map_ok(|()| 0);
        }
        polled
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.stream().poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.refused.is_some() {
            // The problem document still has to go out (when dropped).
            return Poll::Ready(Ok(()));
        }
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
