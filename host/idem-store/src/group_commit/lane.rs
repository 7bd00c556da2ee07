//! The line a group commit's callers wait in: at most `max_in_flight`
//! store calls in flight, and whoever arrives meanwhile goes in the next.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::oneshot;

use super::LaneStats;
use crate::port::Writes;
use crate::vocabulary::StoreError;
use crate::vocabulary::{Write, WriteOutcome};

/// The two kinds of grouped writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Claim,
    Finish,
}

impl Kind {
    pub(super) fn of(write: &Write) -> Kind {
        match write {
            Write::Claim(_) => Kind::Claim,
            Write::Finish(_) => Kind::Finish,
        }
    }
}

/// A lone write, as an ungrouped caller makes it.
async fn write_one(store: &dyn Writes, write: Write) -> Result<WriteOutcome, StoreError> {
    match write {
        Write::Claim(request) => store.claim(request).await.map(WriteOutcome::Claim),
        Write::Finish(finish) => store.finish(finish).await.map(|()| WriteOutcome::Finished),
    }
}

type Reply = oneshot::Sender<Result<WriteOutcome, StoreError>>;

/// Store calls and items of one kind, counted.
#[derive(Default)]
struct Counts {
    calls: AtomicU64,
    items: AtomicU64,
}

/// A line of callers: at most `max_in_flight` store calls in flight, and
/// whoever arrives meanwhile waits in line for the next.
pub(super) struct Lane {
    store: Arc<dyn Writes>,
    pub(super) max_batch: usize,
    pub(super) max_in_flight: usize,
    state: Mutex<LaneState>,
    calls: AtomicU64,
    claims: Counts,
    finishes: Counts,
}

struct LaneState {
    /// Store calls of this lane in flight (or about to be): each is a
    /// [`Turn`]'s.
    in_flight: usize,
    waiting: VecDeque<(Write, Reply)>,
}

impl Lane {
    pub(super) fn new(store: Arc<dyn Writes>, max_batch: usize, max_in_flight: usize) -> Arc<Self> {
        Arc::new(Lane {
            store,
            max_batch,
            max_in_flight,
            state: Mutex::new(LaneState {
                in_flight: 0,
                waiting: VecDeque::new(),
            }),
            calls: AtomicU64::new(0),
            claims: Counts::default(),
            finishes: Counts::default(),
        })
    }

    fn counts(&self, kind: Kind) -> &Counts {
        match kind {
            Kind::Claim => &self.claims,
            Kind::Finish => &self.finishes,
        }
    }

    pub(super) fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }

    pub(super) fn stats(&self, kind: Kind) -> LaneStats {
        let counts = self.counts(kind);
        LaneStats {
            calls: counts.calls.load(Ordering::Relaxed),
            items: counts.items.load(Ordering::Relaxed),
            waiting: self
                .state()
                .waiting
                .iter()
                .filter(|(write, _)| Kind::of(write) == kind)
                .count(),
        }
    }

    /// Counts a store call carrying `writes`.
    fn counted(&self, writes: &[Write]) {
        self.calls.fetch_add(1, Ordering::Relaxed);
        metrics::histogram!("idem_group_commit_batch_size").record(writes.len() as f64);
        for kind in [Kind::Claim, Kind::Finish] {
            let n = writes.iter().filter(|w| Kind::of(w) == kind).count() as u64;
            if n > 0 {
                let counts = self.counts(kind);
                counts.calls.fetch_add(1, Ordering::Relaxed);
                counts.items.fetch_add(n, Ordering::Relaxed);
            }
        }
    }

    fn state(&self) -> MutexGuard<'_, LaneState> {
        // A flag and a queue, never left half-changed: always consistent.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sends `write` now when a slot is free, else in the next batch.
    pub(super) async fn submit(self: &Arc<Self>, write: Write) -> Result<WriteOutcome, StoreError> {
        let receiver = {
            let mut state = self.state();
            // Someone already waits (a drain is about to take them): join
            // the line behind them; else a free slot: go now.
            if state.in_flight >= self.max_in_flight || !state.waiting.is_empty() {
                let (reply, receiver) = oneshot::channel();
                state.waiting.push_back((write, reply));
                Err(receiver)
            } else {
                state.in_flight += 1;
                Ok(write)
            }
        };
        match receiver {
            Ok(write) => {
                // A free slot: this caller's own call, at once. The turn
                // passes on when it ends, even if this future is dropped
                // midway.
                let mut turn = Turn::new(self.clone());
                self.counted(std::slice::from_ref(&write));
                let answer = write_one(self.store.as_ref(), write).await;
                turn.pass();
                answer
            }
            Err(receiver) => receiver.await.unwrap_or_else(|_| Err(stopped())),
        }
    }

    /// Puts `writes` in line together (behind whoever waits) and answers
    /// each, in order: a caller's own batch shares store calls with
    /// everyone else's writes. Starts a drain when a slot is free.
    pub(super) async fn submit_many(
        self: &Arc<Self>,
        writes: Vec<Write>,
    ) -> Vec<Result<WriteOutcome, StoreError>> {
        let (receivers, start) = {
            let mut state = self.state();
            let receivers: Vec<_> = writes
                .into_iter()
                .map(|write| {
                    let (reply, receiver) = oneshot::channel();
                    state.waiting.push_back((write, reply));
                    receiver
                })
                .collect();
            let start = state.in_flight < self.max_in_flight;
            if start {
                state.in_flight += 1;
            }
            (receivers, start)
        };
        if start {
            // The slot taken above is the drain's: its turn gives it back.
            tokio::spawn(self.clone().drain());
        }
        let mut answers = Vec::with_capacity(receivers.len());
        for receiver in receivers {
            answers.push(receiver.await.unwrap_or_else(|_| Err(stopped())));
        }
        answers
    }

    /// Sends what waits, batch after batch, until the line is empty.
    async fn drain(self: Arc<Self>) {
        let mut turn = Turn::new(self.clone());
        loop {
            let batch: Vec<(Write, Reply)> = {
                let mut state = self.state();
                // A caller that gave up is left out: nothing written for it.
                state.waiting.retain(|(_, reply)| !reply.is_closed());
                if state.waiting.is_empty() {
                    state.in_flight -= 1;
                    turn.done();
                    return;
                }
                let n = state.waiting.len().min(self.max_batch);
                state.waiting.drain(..n).collect()
            };
            let (writes, replies): (Vec<_>, Vec<_>) = batch.into_iter().unzip();
            self.counted(&writes);
            if writes.len() == 1 {
                let write = writes.into_iter().next().expect("one write");
                let answer = write_one(self.store.as_ref(), write).await;
                let reply = replies.into_iter().next().expect("one reply");
                let _ = reply.send(answer);
                continue;
            }
            let asked = writes.len();
            match self.store.write_many(writes).await {
                Ok(answers) if answers.len() == asked => {
                    for (reply, answer) in replies.into_iter().zip(answers) {
                        let _ = reply.send(answer);
                    }
                }
                Ok(answers) => {
                    let e = StoreError::Task(format!(
                        "the store answered {} of {asked} grouped calls",
                        answers.len()
                    ));
                    for reply in replies {
                        let _ = reply.send(Err(e.clone()));
                    }
                }
                Err(e) => {
                    for reply in replies {
                        let _ = reply.send(Err(e.clone()));
                    }
                }
            }
        }
    }
}

/// The right to have a store call of the lane in flight. Dropped without
/// [`Turn::done`] (a call ended, or its future was dropped, or it
/// panicked), it hands the line to a drain task when callers wait, so that
/// nobody waits on a call that will never end.
struct Turn {
    lane: Arc<Lane>,
    armed: bool,
}

impl Turn {
    fn new(lane: Arc<Lane>) -> Self {
        Turn { lane, armed: true }
    }

    /// Hands the line on now.
    fn pass(&mut self) {
        if std::mem::replace(&mut self.armed, false) {
            pass_on(&self.lane);
        }
    }

    /// The lane was left idle by its holder: nothing to hand on.
    fn done(&mut self) {
        self.armed = false;
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        self.pass();
    }
}

/// Ends a turn: its slot freed when nobody waits, else a drain task takes
/// the slot over.
fn pass_on(lane: &Arc<Lane>) {
    let mut state = lane.state();
    if state.waiting.is_empty() {
        state.in_flight -= 1;
        return;
    }
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => {
            drop(state);
            runtime.spawn(lane.clone().drain());
        }
        Err(_) => {
            // No runtime to send them from (it is shutting down): the
            // waiters get an error, not a wait that never ends.
            state.in_flight -= 1;
            state.waiting.clear();
        }
    }
}

/// A waiter whose line was dropped unanswered.
pub(super) fn stopped() -> StoreError {
    StoreError::Task(
        "the group commit stopped before answering (the runtime is shutting down)".into(),
    )
}
