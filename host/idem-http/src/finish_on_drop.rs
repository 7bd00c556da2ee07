//! A request's work is polled in place, in the request's own future, and
//! still runs to its end when the request is dropped unfinished.
//!
//! The layer must record a handler's end even when the client hangs up
//! (the server then drops the request's future): otherwise the claim would
//! sit until its lease ends. Spawning the work in a task of its own would
//! do that, but would cost every request a second task: on SQLite, whose
//! calls block in place (`block_in_place`) on the worker running them, the
//! spawned task and the request's task waiting for it would wake each
//! other and hand the worker between threads on every store call, which
//! was most of the CPU the layer added to a request (see
//! `docs/benchmarks.md`). So [`FinishOnDrop`] polls the work where it is
//! awaited, and only if it is dropped before it is ready does it hand
//! what is left to a task on the current runtime, to run to its end.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tracing::Instrument;

/// `future`, polled where it is awaited; dropped before it is ready, it
/// goes on in a task of its own (on the current runtime).
pub(crate) struct FinishOnDrop<F: Future + Send + 'static>
where
    F::Output: Send + 'static,
{
    future: Option<Pin<Box<F>>>,
}

impl<F: Future + Send + 'static> FinishOnDrop<F>
where
    F::Output: Send + 'static,
{
    pub(crate) fn new(future: F) -> Self {
        FinishOnDrop {
            future: Some(Box::pin(future)),
        }
    }
}

impl<F: Future + Send + 'static> Future for FinishOnDrop<F>
where
    F::Output: Send + 'static,
{
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let future = self
            .future
            .as_mut()
            .expect("FinishOnDrop polled after it was ready");
        match future.as_mut().poll(cx) {
            Poll::Ready(output) => {
                self.future = None;
                Poll::Ready(output)
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<F: Future + Send + 'static> Drop for FinishOnDrop<F>
where
    F::Output: Send + 'static,
{
    fn drop(&mut self) {
        if let Some(rest) = self.future.take() {
            match tokio::runtime::Handle::try_current() {
                Ok(runtime) => {
                    // Still in the request's span: its end is logged as the
                    // request's.
                    runtime.spawn(rest.instrument(tracing::Span::current()));
                }
                // No runtime (it is shutting down): nothing can run it; the
                // claim then lapses and the policy decides, as for a crash.
                Err(_) => tracing::warn!("a request's work was dropped with no runtime to end it"),
            }
        }
    }
}
