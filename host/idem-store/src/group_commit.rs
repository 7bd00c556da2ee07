//! Group commit: concurrent callers' claims and finishes share store calls.
//!
//! A payment service serves many requests at once, each claiming a key and
//! later completing it. Alone, each of those writes is a durable commit of
//! its own (SQLite: one fsync; PostgreSQL: one round trip and one WAL
//! flush). [`GroupCommit`] wraps a store so that every claim that arrives
//! while another claim's store call is in flight waits for it and then goes,
//! with all the others that queued meanwhile, in *one*
//! [`Store::claim_many`] call — one transaction on SQLite, one statement on
//! PostgreSQL; finishes likewise through [`Store::finish_many`]. Where the
//! store has one writer and a batch of both kinds is one commit
//! ([`Store::mixes_writes`]: SQLite), claims and finishes wait in *one*
//! line and go together through [`Store::write_many`]: two lines would
//! only take turns on the one connection, each paying a commit.
//!
//! No timer: a caller that finds nothing in flight (more generally, fewer
//! than [`GroupCommitOptions::max_in_flight`] calls) makes its own call at
//! once, exactly as without the wrapper (a lone caller pays a lock and
//! nothing else); the wait is bounded by the one call in flight. No weaker
//! guarantee: a batch call returns only once its writes are committed, so
//! each caller learns its answer only after its own write is durable; each
//! write is still conditional on its own key and fence (the store decides
//! each item as it would alone, in arrival order: a key repeated in a batch
//! finds what its first occurrence made); a refusal is that caller's alone.
//! A failure of a whole batch call (the disk, the connection) is every
//! caller's in it, as it would have been had each called alone at that
//! moment. A caller that gives up (its future dropped) before its batch is
//! sent is left out of it: nothing is written for it.
//!
//! Only claims and finishes are grouped: they are the writes every
//! operation makes. Take-overs, heartbeats and the rest go straight through.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::oneshot;

use crate::attempt::{AttemptEntry, AttemptFilter, ResolveRequest};
use crate::clock::StoreClock;
use crate::error::StoreError;
use crate::holder::Holder;
use crate::record::{
    Claim, ClaimOutcome, ClaimRequest, Ending, Finish, JobLeaseAcquire, ListFilter, Membership,
    Outcome, OwnershipToken, RecordKey, RecordView, Write, WriteOutcome,
};
use crate::registry::{Activation, Registration, Rollback};
use crate::store::Store;

/// How [`GroupCommit`] groups.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupCommitOptions {
    /// Whether to group at all. An engine groups only on a store whose
    /// batches share commits ([`Store::batches_share_commits`]).
    pub enabled: bool,
    /// The most items one store call carries; more waiting callers go in
    /// the next call. Bounds the size of a transaction (and so how long it
    /// holds SQLite's write lock).
    pub max_batch: usize,
    /// How many store calls of one kind (claims, finishes) may be in flight
    /// at once before callers wait in line; `None` (the default): what the
    /// store says serves it best ([`Store::concurrent_commits`]: one on
    /// SQLite, a single writer; four on PostgreSQL, whose server already
    /// flushes concurrent commits together). One groups the most.
    pub max_in_flight: Option<usize>,
}

impl Default for GroupCommitOptions {
    fn default() -> Self {
        GroupCommitOptions {
            enabled: true,
            max_batch: 64,
            max_in_flight: None,
        }
    }
}

/// A store whose concurrent claims and finishes share store calls (see
/// the module docs). Every other call goes straight to the wrapped store.
pub struct GroupCommit {
    inner: Arc<dyn Store>,
    claims: Arc<Lane>,
    /// The claims' own lane where the store mixes writes
    /// ([`Store::mixes_writes`]): claims and finishes then wait in one line
    /// and share each commit.
    finishes: Arc<Lane>,
}

impl std::fmt::Debug for GroupCommit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupCommit")
            .field("store", &self.inner.describe())
            .field("max_batch", &self.claims.max_batch)
            .field("max_in_flight", &self.claims.max_in_flight)
            .field("mixed", &self.mixed())
            .finish()
    }
}

impl GroupCommit {
    /// A finish, through its line.
    async fn finish(&self, finish: Finish) -> Result<(), StoreError> {
        as_finished(self.finishes.submit(Write::Finish(finish)).await)
    }

    /// Wraps `store`. `options.enabled` is not consulted here: wrapping is
    /// the decision to group.
    pub fn new(store: Arc<dyn Store>, options: GroupCommitOptions) -> Self {
        let max_batch = options.max_batch.max(1);
        let max_in_flight = options
            .max_in_flight
            .unwrap_or_else(|| store.concurrent_commits())
            .max(1);
        let claims = Lane::new(store.clone(), max_batch, max_in_flight);
        let finishes = if store.mixes_writes() {
            claims.clone()
        } else {
            Lane::new(store.clone(), max_batch, max_in_flight)
        };
        GroupCommit {
            claims,
            finishes,
            inner: store,
        }
    }

    /// `store` wrapped when `options` ask for grouping and the store gains
    /// from it; else `store` itself.
    pub fn wrap_if_useful(store: Arc<dyn Store>, options: GroupCommitOptions) -> Arc<dyn Store> {
        if options.enabled && store.batches_share_commits() {
            Arc::new(GroupCommit::new(store, options))
        } else {
            store
        }
    }

    /// The wrapped store.
    pub fn inner(&self) -> &Arc<dyn Store> {
        &self.inner
    }

    /// Whether claims and finishes wait in one line and share store calls.
    fn mixed(&self) -> bool {
        Arc::ptr_eq(&self.claims, &self.finishes)
    }

    /// How much grouping happened so far, and who waits now.
    pub fn stats(&self) -> GroupCommitStats {
        let calls = if self.mixed() {
            self.claims.calls()
        } else {
            self.claims.calls() + self.finishes.calls()
        };
        GroupCommitStats {
            claims: self.claims.stats(Kind::Claim),
            finishes: self.finishes.stats(Kind::Finish),
            calls,
        }
    }
}

/// What a [`GroupCommit`] did (see [`GroupCommit::stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GroupCommitStats {
    /// Claims.
    pub claims: LaneStats,
    /// Completions and failures.
    pub finishes: LaneStats,
    /// Store calls made in all. Where the store mixes writes
    /// ([`Store::mixes_writes`]) one call may carry claims and finishes
    /// together, and counts in both kinds' `calls`, once here.
    pub calls: u64,
}

/// One kind of grouped call's figures.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LaneStats {
    /// Store calls that carried this kind (a lone item or a batch each).
    pub calls: u64,
    /// Items of this kind those calls carried: `items / calls` is the mean
    /// batch size.
    pub items: u64,
    /// Callers of this kind waiting now for a call in flight to end.
    pub waiting: usize,
}

/// The two kinds of grouped writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Claim,
    Finish,
}

impl Kind {
    fn of(write: &Write) -> Kind {
        match write {
            Write::Claim(_) => Kind::Claim,
            Write::Finish(_) => Kind::Finish,
        }
    }
}

/// A lone write, as an ungrouped caller makes it.
async fn write_one(store: &dyn Store, write: Write) -> Result<WriteOutcome, StoreError> {
    match write {
        Write::Claim(request) => store.claim(request).await.map(WriteOutcome::Claim),
        Write::Finish(f) => match f.ending {
            Ending::Completed => store.complete(&f.key, f.fence, f.outcome).await,
            Ending::Failed { retryable } => store.fail(&f.key, f.fence, retryable, f.outcome).await,
        }
        .map(|()| WriteOutcome::Finished),
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
struct Lane {
    store: Arc<dyn Store>,
    max_batch: usize,
    max_in_flight: usize,
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
    fn new(store: Arc<dyn Store>, max_batch: usize, max_in_flight: usize) -> Arc<Self> {
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

    fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }

    fn stats(&self, kind: Kind) -> LaneStats {
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
    async fn submit(self: &Arc<Self>, write: Write) -> Result<WriteOutcome, StoreError> {
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
    async fn submit_many(
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
fn stopped() -> StoreError {
    StoreError::Task(
        "the group commit stopped before answering (the runtime is shutting down)".into(),
    )
}

/// A claim's answer from its line. Another kind of answer (never, from a
/// correct store) is an error, not a panic.
fn as_claim(answer: Result<WriteOutcome, StoreError>) -> Result<ClaimOutcome, StoreError> {
    match answer? {
        WriteOutcome::Claim(outcome) => Ok(outcome),
        WriteOutcome::Finished => Err(mismatched("claim")),
    }
}

/// A finish's answer from its line (see [`as_claim`]).
fn as_finished(answer: Result<WriteOutcome, StoreError>) -> Result<(), StoreError> {
    match answer? {
        WriteOutcome::Finished => Ok(()),
        WriteOutcome::Claim(_) => Err(mismatched("finish")),
    }
}

fn mismatched(kind: &str) -> StoreError {
    StoreError::Task(format!(
        "the group commit got another kind of answer for a {kind}"
    ))
}

#[async_trait]
impl Store for GroupCommit {
    fn describe(&self) -> String {
        self.inner.describe()
    }

    fn clock(&self) -> &StoreClock {
        self.inner.clock()
    }

    fn batches_share_commits(&self) -> bool {
        self.inner.batches_share_commits()
    }

    fn concurrent_commits(&self) -> usize {
        self.inner.concurrent_commits()
    }

    fn mixes_writes(&self) -> bool {
        self.inner.mixes_writes()
    }

    async fn ready(&self) -> Result<(), StoreError> {
        self.inner.ready().await
    }

    async fn claim(&self, request: ClaimRequest) -> Result<ClaimOutcome, StoreError> {
        as_claim(self.claims.submit(Write::Claim(request)).await)
    }

    /// On one writer, a caller's batch smaller than a full call joins the
    /// line (so that a job's claims and its finishes share commits);
    /// otherwise it is one store call of its own (PostgreSQL: one
    /// statement).
    async fn claim_many(
        &self,
        mut requests: Vec<ClaimRequest>,
    ) -> Result<Vec<Result<ClaimOutcome, StoreError>>, StoreError> {
        crate::machine::one_claim_per_attempt(&mut requests);
        if !self.mixed() || requests.len() >= self.claims.max_batch {
            return self.inner.claim_many(requests).await;
        }
        let writes = requests.into_iter().map(Write::Claim).collect();
        Ok(self
            .claims
            .submit_many(writes)
            .await
            .into_iter()
            .map(as_claim)
            .collect())
    }

    async fn take_over_with(
        &self,
        key: &RecordKey,
        observed_fence: u64,
        lease: Duration,
        holder: Holder,
        ownership: Option<&OwnershipToken>,
    ) -> Result<Claim, StoreError> {
        self.inner
            .take_over_with(key, observed_fence, lease, holder, ownership)
            .await
    }

    async fn mark_unknown(&self, key: &RecordKey, observed_fence: u64) -> Result<(), StoreError> {
        self.inner.mark_unknown(key, observed_fence).await
    }

    async fn complete(
        &self,
        key: &RecordKey,
        fence: u64,
        outcome: Outcome,
    ) -> Result<(), StoreError> {
        self.finish(Finish {
            key: key.clone(),
            fence,
            ending: Ending::Completed,
            outcome,
        })
        .await
    }

    async fn fail(
        &self,
        key: &RecordKey,
        fence: u64,
        retryable: bool,
        outcome: Outcome,
    ) -> Result<(), StoreError> {
        self.finish(Finish {
            key: key.clone(),
            fence,
            ending: Ending::Failed { retryable },
            outcome,
        })
        .await
    }

    /// As [`GroupCommit::claim_many`]: in line on one writer, else one
    /// store call.
    async fn finish_many(
        &self,
        finishes: Vec<Finish>,
    ) -> Result<Vec<Result<(), StoreError>>, StoreError> {
        if !self.mixed() || finishes.len() >= self.finishes.max_batch {
            return self.inner.finish_many(finishes).await;
        }
        let writes = finishes.into_iter().map(Write::Finish).collect();
        Ok(self
            .finishes
            .submit_many(writes)
            .await
            .into_iter()
            .map(as_finished)
            .collect())
    }

    async fn write_many(
        &self,
        writes: Vec<Write>,
    ) -> Result<Vec<Result<WriteOutcome, StoreError>>, StoreError> {
        self.inner.write_many(writes).await
    }

    async fn heartbeat(
        &self,
        key: &RecordKey,
        fence: u64,
        lease: Duration,
    ) -> Result<u64, StoreError> {
        self.inner.heartbeat(key, fence, lease).await
    }

    async fn get(&self, key: &RecordKey) -> Result<Option<RecordView>, StoreError> {
        self.inner.get(key).await
    }

    async fn list(&self, filter: ListFilter) -> Result<Vec<RecordView>, StoreError> {
        self.inner.list(filter).await
    }

    async fn gc(&self) -> Result<u64, StoreError> {
        self.inner.gc().await
    }

    async fn log_answers(&self, entries: Vec<AttemptEntry>) -> Result<(), StoreError> {
        self.inner.log_answers(entries).await
    }

    async fn attempts(&self, filter: AttemptFilter) -> Result<Vec<AttemptEntry>, StoreError> {
        self.inner.attempts(filter).await
    }

    async fn resolve(&self, request: ResolveRequest) -> Result<RecordView, StoreError> {
        self.inner.resolve(request).await
    }

    async fn join_membership(
        &self,
        group: &str,
        members: &[String],
    ) -> Result<Membership, StoreError> {
        self.inner.join_membership(group, members).await
    }

    async fn membership(&self, group: &str) -> Result<Option<Membership>, StoreError> {
        self.inner.membership(group).await
    }

    async fn acquire_job_lease(
        &self,
        job: &str,
        holder: &str,
        lease: Duration,
    ) -> Result<JobLeaseAcquire, StoreError> {
        self.inner.acquire_job_lease(job, holder, lease).await
    }

    async fn heartbeat_job_lease(
        &self,
        job: &str,
        fence: u64,
        lease: Duration,
    ) -> Result<u64, StoreError> {
        self.inner.heartbeat_job_lease(job, fence, lease).await
    }

    async fn release_job_lease(&self, job: &str, fence: u64) -> Result<(), StoreError> {
        self.inner.release_job_lease(job, fence).await
    }

    async fn registration(&self, namespace: &str) -> Result<Option<Registration>, StoreError> {
        self.inner.registration(namespace).await
    }

    async fn registrations(&self) -> Result<Vec<Registration>, StoreError> {
        self.inner.registrations().await
    }

    async fn activate_policy(&self, request: Activation) -> Result<Registration, StoreError> {
        self.inner.activate_policy(request).await
    }

    async fn rollback_policy(&self, request: Rollback) -> Result<Registration, StoreError> {
        self.inner.rollback_policy(request).await
    }

    async fn policy_component(&self, digest: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.inner.policy_component(digest).await
    }

    async fn requires_registration(&self) -> Result<bool, StoreError> {
        self.inner.requires_registration().await
    }

    async fn set_require_registration(&self, on: bool) -> Result<(), StoreError> {
        self.inner.set_require_registration(on).await
    }
}
