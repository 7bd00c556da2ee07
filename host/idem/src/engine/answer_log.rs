//! The answers to duplicates, appended to the store's attempt log in
//! batches.
//!
//! A record change logs itself in its own transaction (the store does
//! that). An answer to a duplicate (a replay, in progress, a conflict, a
//! rejection) changes no record, so writing it synchronously would turn
//! every replay, otherwise a read, into a write and a commit of its own —
//! on a re-run of a nightly job, one fsync per operation. Instead each
//! answer is queued and written by a single flusher: whatever queued up
//! while one store call was in flight goes in the next call (group
//! commit, no timer, no added latency for the caller). The cost: an answer
//! given just before the process dies may be missing from the log; a
//! record change never is. [`AnswerLog::flush`] waits for everything
//! queued so far (`idem exec`, `idem run` and the job runner call it
//! before they report).

use std::sync::{Arc, Mutex};

use idem_store::{AttemptEntry, Store};
use tokio::sync::Notify;

/// The queue and its flusher.
pub(crate) struct AnswerLog {
    store: Store,
    state: Mutex<State>,
    progress: Notify,
}

#[derive(Default)]
struct State {
    pending: Vec<AttemptEntry>,
    /// Whether a flusher task is running.
    flushing: bool,
    /// Entries queued since the start.
    queued: u64,
    /// Entries written or given up on since the start.
    settled: u64,
}

impl AnswerLog {
    pub(crate) fn new(store: Store) -> Arc<Self> {
        Arc::new(AnswerLog {
            store,
            state: Mutex::new(State::default()),
            progress: Notify::new(),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // The state is plain counters and a queue: always consistent.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues `entry`; starts the flusher when none runs. Must be called
    /// inside a tokio runtime (every engine call is).
    pub(crate) fn push(self: &Arc<Self>, entry: AttemptEntry) {
        let start = {
            let mut state = self.state();
            state.pending.push(entry);
            state.queued += 1;
            !std::mem::replace(&mut state.flushing, true)
        };
        if start {
            let log = self.clone();
            tokio::spawn(async move { log.flush_loop().await });
        }
    }

    /// Writes batches until the queue is empty.
    async fn flush_loop(self: Arc<Self>) {
        loop {
            let batch = {
                let mut state = self.state();
                if state.pending.is_empty() {
                    state.flushing = false;
                    drop(state);
                    self.progress.notify_waiters();
                    return;
                }
                std::mem::take(&mut state.pending)
            };
            let count = batch.len() as u64;
            if let Err(e) = self.store.records().log_answers(batch).await {
                // Forensics only: the answers were given and the records
                // are intact; say so and carry on.
                tracing::warn!(error = %e, entries = count, "could not write answers to the attempt log");
            }
            self.state().settled += count;
            self.progress.notify_waiters();
        }
    }

    /// Waits until every entry queued before this call is written (or
    /// given up on after a store error, which is logged).
    pub(crate) async fn flush(&self) {
        let target = self.state().queued;
        loop {
            let notified = self.progress.notified();
            tokio::pin!(notified);
            // Registered before the check, so a notification between the
            // check and the wait is not missed.
            notified.as_mut().enable();
            if self.state().settled >= target {
                return;
            }
            notified.await;
        }
    }
}
