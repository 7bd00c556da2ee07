//! The job's main loop: claim what can start now in one store call, run
//! each claimed operation's effect in a task of its own, count the ends.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use idem_core::{Digest, Operation};
use idem_store::{Finish, RecordKey};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio::task::{JoinError, JoinSet};

use super::effect::{Effect, run_effect_recording};
use super::event::{JobEvent, Observer};
use super::feed::Fed;
use super::finisher::Finisher;
use super::peers;
use super::summary::{End, Outage, Summary};
use super::{fate, one, outage};
use crate::engine::{Begin, Engine, EngineError, FirstClaim, ToClaim};

/// How many operations run at once, how many store calls batch, and how
/// long an operation a peer holds is waited for.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub(crate) concurrency: usize,
    pub(crate) claim_batch: usize,
    pub(crate) finish_batch: usize,
    pub(crate) wait_for_peers: Option<Duration>,
    pub(crate) store_outage: Duration,
}

/// What one operation's task shares with the others.
struct Shared<E> {
    engine: Arc<Engine>,
    finisher: Finisher,
    effect: Arc<E>,
    permits: Arc<Semaphore>,
    wait_for_peers: Option<Duration>,
    store_outage: Duration,
    /// Operations read ahead that need a claim, in order: they hold no
    /// claim (and no lease) while they wait for a slot.
    pending: Mutex<VecDeque<ToClaim>>,
    /// A lone worker (concurrency 1): the task ending an operation claims
    /// the next pending one in the same store call, and runs it in its slot.
    lone: bool,
    /// The run takes no more operations (a store outage past its budget).
    stopping: AtomicBool,
}

impl<E> Shared<E> {
    /// The pending operation a lone worker claims with `finish`, if any
    /// may share its store call (see [`Engine::pairs`]).
    fn next_to_pair(&self, finish: &Finish) -> Option<ToClaim> {
        if !self.lone || self.stopping.load(Ordering::Acquire) {
            return None;
        }
        let mut pending = self
            .pending
            .lock()
            .expect("the pending queue is never poisoned");
        match pending.front() {
            Some(next) if self.engine.pairs(finish, next) => pending.pop_front(),
            _ => None,
        }
    }
}

/// The operation a task goes on with after its own, in the same slot: one
/// claimed together with its own end, or one whose claim must be sent again.
enum Next {
    Claimed(FirstClaim),
    Unclaimed(ToClaim),
}

/// Runs every operation `fed` through `effect`, at most `concurrency` at
/// once, and returns the tally and how many operations it took. Only
/// operations about to start are claimed: a claim's lease runs from the
/// claim, so none waits for a free slot while claimed.
pub(crate) async fn run_all<E: Effect>(
    engine: Arc<Engine>,
    mut fed: mpsc::Receiver<Fed>,
    effect: Arc<E>,
    limits: Limits,
    observer: &Observer,
) -> (Summary, u64) {
    let permits = Arc::new(Semaphore::new(limits.concurrency));
    let mut tasks = JoinSet::new();
    let shared = Arc::new(Shared {
        finisher: Finisher::start(engine.clone(), limits.finish_batch, limits.store_outage),
        engine: engine.clone(),
        effect,
        permits: permits.clone(),
        wait_for_peers: limits.wait_for_peers,
        store_outage: limits.store_outage,
        pending: Mutex::new(VecDeque::new()),
        lone: limits.concurrency == 1,
        stopping: AtomicBool::new(false),
    });
    let pending = || {
        shared
            .pending
            .lock()
            .expect("the pending queue is never poisoned")
    };
    let mut summary = Summary::default();
    let mut taken: u64 = 0;
    loop {
        // Count what has finished so far.
        while let Some(joined) = tasks.try_join_next() {
            count(&mut summary, joined, observer);
        }
        if pending().is_empty() {
            // The next operations (at least one, waiting for the second
            // read if need be; more if they are ready): what is already
            // done is settled now from one read, without a slot or a claim.
            let Some(first) = fed.recv().await else {
                break;
            };
            let mut ahead = vec![engine.to_claim(first)];
            while ahead.len() < limits.claim_batch {
                match fed.try_recv() {
                    Ok(next) => ahead.push(engine.to_claim(next)),
                    Err(_) => break,
                }
            }
            taken += ahead.len() as u64;
            let left = settle_ahead(&engine, ahead, &mut summary, observer).await;
            pending().extend(left);
            continue;
        }
        // Wait for one free slot, then take every other free one (up to the
        // batch size and what waits): the operations that can start now
        // are claimed together, in one store call.
        let mut held = vec![
            permits
                .clone()
                .acquire_owned()
                .await
                .expect("the semaphore is never closed"),
        ];
        let batch: Vec<ToClaim> = {
            let mut pending = pending();
            while held.len() < limits.claim_batch.min(pending.len()) {
                match permits.clone().try_acquire_owned() {
                    Ok(permit) => held.push(permit),
                    Err(_) => break,
                }
            }
            // A lone worker's task may have claimed them all meanwhile.
            let n = held.len().min(pending.len());
            pending.drain(..n).collect()
        };
        if batch.is_empty() {
            continue;
        }
        let (claimed, gave_up) =
            claim_riding_out(&engine, batch, limits.store_outage, observer).await;
        // What the store did claim (or answered with a record) goes on, even
        // when the rest could not be claimed: those claims are live.
        let mut held = held.into_iter();
        for claimed in claimed {
            let permit = held.next().expect("a permit per operation of the batch");
            let shared = shared.clone();
            let observer = observer.clone();
            tasks.spawn(async move { run_in_slot(&shared, claimed, permit, &observer).await });
        }
        let Some((gave_up, unclaimed)) = gave_up else {
            continue;
        };
        // None of these started, so none of their effects happened; a claim
        // the store may have made before failing is found by the next run
        // (and the policy decides).
        for _ in 0..unclaimed {
            ended(&mut summary, End::NotRun, None, observer);
        }
        if !gave_up.error.is_store_unavailable() {
            observer(JobEvent::Warning(&format!(
                "claiming a batch of {unclaimed} failed: {}; not run",
                gave_up.error
            )));
            continue;
        }
        // Past the outage budget: take no more operations. The effects
        // already running go on, their ends recorded if the store comes back
        // in time.
        observer(JobEvent::Warning(&format!(
            "{}; stopped taking operations",
            outage::describe(&gave_up)
        )));
        summary.outage = Some(Outage {
            lasted_ms: gave_up.lasted.as_millis() as u64,
            error: gave_up.error.to_string(),
        });
        break;
    }
    // Read ahead but never claimed (the run stopped on an outage): not run.
    // Said under the queue's lock, so a lone worker's task takes none of
    // them after this.
    shared.stopping.store(true, Ordering::Release);
    let left = pending().drain(..).count();
    for _ in 0..left {
        ended(&mut summary, End::NotRun, None, observer);
    }
    while let Some(joined) = tasks.join_next().await {
        count(&mut summary, joined, observer);
    }
    (summary, taken)
}

/// One slot's task: begins and settles `claimed`, then, for a lone worker
/// whose end shared its store call with the next claim, that operation, and
/// so on. Each end is said as it happens; all are counted when the main
/// loop collects the task.
async fn run_in_slot<E: Effect>(
    shared: &Shared<E>,
    claimed: FirstClaim,
    permit: OwnedSemaphorePermit,
    observer: &Observer,
) -> Vec<End> {
    let mut ends = Vec::with_capacity(1);
    let mut next = Some((Next::Claimed(claimed), permit));
    while let Some((this, permit)) = next.take() {
        let (op, key, begun) = match this {
            Next::Claimed(claimed) => {
                let op = claimed.operation().clone();
                let key = claimed.key();
                (op, key, begin(shared, claimed, observer).await)
            }
            Next::Unclaimed(item) => {
                let op = item.operation().clone();
                let key = item.request().key.digest;
                (op, key, claim_alone(shared, item, observer).await)
            }
        };
        let (end, note, then) = settle(shared, op, key, begun, permit, observer).await;
        observer(JobEvent::Ended {
            end,
            note: note.as_deref(),
        });
        ends.push(end);
        next = then;
    }
    ends
}

/// Claims `batch` in one store call, trying again while the store is
/// unavailable, up to `budget` (see [`outage`]): the whole call, or the
/// operations whose own claim the store could not make. Returns the claims
/// made (or the records found), and when it gave up, why and how many
/// operations were left unclaimed.
async fn claim_riding_out(
    engine: &Engine,
    mut batch: Vec<ToClaim>,
    budget: Duration,
    observer: &Observer,
) -> (Vec<FirstClaim>, Option<(outage::GaveUp, usize)>) {
    // Each request is made once (`Engine::to_claim`): sent again, it
    // carries the same holder token, so a claim that committed while its
    // answer was lost is found to be this one (see
    // `idem_store::HolderToken`).
    let mut backoff = outage::Backoff::new(budget);
    let mut done = Vec::with_capacity(batch.len());
    loop {
        let error = match engine.claim_batch_keeping(batch).await {
            Ok(claimed) => {
                let mut retry = Vec::new();
                let mut error = None;
                for claimed in claimed {
                    match claimed.store_unavailable() {
                        Some(e) => {
                            error.get_or_insert_with(|| EngineError::Store(e.clone()));
                            retry.push(claimed.into_retry());
                        }
                        None => done.push(claimed),
                    }
                }
                let Some(error) = error else {
                    return (done, None);
                };
                batch = retry;
                error
            }
            Err((e, back)) if e.is_store_unavailable() => {
                batch = back;
                e
            }
            Err((error, back)) => {
                let gave_up = outage::GaveUp {
                    error,
                    lasted: Duration::ZERO,
                };
                return (done, Some((gave_up, back.len())));
            }
        };
        match backoff.after_failure().await {
            outage::Next::Again { first: true } => observer(JobEvent::Warning(&format!(
                "the store is unavailable ({error}); trying again for up to {budget:?} while the effects already running go on"
            ))),
            outage::Next::Again { first: false } => {}
            outage::Next::GiveUp(lasted) => {
                let left = batch.len();
                return (done, Some((outage::GaveUp { error, lasted }, left)));
            }
        }
    }
}

/// Settles the operations of `ahead` whose records are final now (one
/// read: `Engine::settle_ahead`) and returns the rest, in order, for a
/// claim. A read that fails settles nothing: every operation is claimed,
/// which rides out an outage as always.
async fn settle_ahead(
    engine: &Engine,
    ahead: Vec<ToClaim>,
    summary: &mut Summary,
    observer: &Observer,
) -> Vec<ToClaim> {
    let answers = match engine.settle_ahead(&ahead).await {
        Ok(answers) => answers,
        Err(e) => {
            tracing::debug!(error = %e, "the look-ahead read failed; claiming instead");
            return ahead;
        }
    };
    let mut left = Vec::new();
    for (item, answer) in ahead.into_iter().zip(answers) {
        match answer {
            Some(begun) => {
                let (end, note) = not_executed(begun, item.request().key.digest);
                ended(summary, end, note.as_deref(), observer);
            }
            None => left.push(item),
        }
    }
    left
}

/// Settles what the batch claim answered for one operation. A fresh claim
/// or a final record needs nothing more of the store; an open record may (a
/// take-over, a wait), and while the store is unavailable for that, the
/// claim is sent again as the same request, within the outage budget.
async fn begin<E>(
    shared: &Shared<E>,
    claimed: FirstClaim,
    observer: &Observer,
) -> Result<Begin, EngineError> {
    if !claimed.may_call_the_store() {
        return shared.engine.begin_claimed(claimed).await;
    }
    let item = claimed.to_retry();
    let budget = shared.store_outage;
    one::settle_riding_out(&shared.engine, item, Some(claimed), budget, |e| {
        observer(JobEvent::Warning(&format!(
            "the store is unavailable ({e}) while settling a duplicate; trying again for up to {budget:?}"
        )))
    })
    .await
}

/// Claims `item` alone and settles what the claim answered, sending it
/// again while the store is unavailable, within the outage budget: a lone
/// worker's next operation whose shared store call did not claim it.
async fn claim_alone<E>(
    shared: &Shared<E>,
    item: ToClaim,
    observer: &Observer,
) -> Result<Begin, EngineError> {
    let budget = shared.store_outage;
    one::settle_riding_out(&shared.engine, item, None, budget, |e| {
        observer(JobEvent::Warning(&format!(
            "the store is unavailable ({e}) while claiming; trying again for up to {budget:?}"
        )))
    })
    .await
}

/// Counts a finished task's operations (already reported by the task); a
/// task that panicked is an operation whose outcome is unknown.
fn count(summary: &mut Summary, joined: Result<Vec<End>, JoinError>, observer: &Observer) {
    match joined {
        Ok(ends) => ends.into_iter().for_each(|end| summary.count(end)),
        Err(e) => {
            tracing::error!(error = %e, "operation task failed");
            ended(summary, End::Unknown, None, observer);
        }
    }
}

/// Reports and counts an end the main loop itself decided.
fn ended(summary: &mut Summary, end: End, note: Option<&str>, observer: &Observer) {
    observer(JobEvent::Ended { end, note });
    summary.count(end);
}

/// How one operation ended; the note says why, for the ends that deserve
/// a word.
type Ended = (End, Option<String>);

/// How one operation ended, and the operation its slot goes on with.
type EndedThen = (End, Option<String>, Option<(Next, OwnedSemaphorePermit)>);

/// Settles one begun operation: runs the effect if this run holds it, and
/// with `wait_for_peers`, waits for one a live peer holds and begins it
/// again. Gives up its slot (`permit`) when its effect is over (before its
/// end is recorded: recording needs no slot, and a slot freed at once lets
/// the next claims overlap the recording) or when it starts waiting.
async fn settle<E: Effect>(
    shared: &Shared<E>,
    op: Operation,
    key: Digest,
    begun: Result<Begin, EngineError>,
    permit: OwnedSemaphorePermit,
    observer: &Observer,
) -> EndedThen {
    match begun {
        Ok(Begin::InProgress { key, .. }) if shared.wait_for_peers.is_some() => {
            drop(permit);
            wait_for_peer(shared, op, key, observer).await
        }
        Ok(Begin::Execute(execution)) => run_held(shared, op, execution, permit, observer).await,
        other => {
            let (end, note) = not_executed(other, key);
            (end, note, None)
        }
    }
}

/// Waits (holding no slot) until the peer holding `key` ends its claim,
/// then takes a slot and begins the operation again: a replay, or what the
/// policy decides for a failure or a lapsed claim.
async fn wait_for_peer<E: Effect>(
    shared: &Shared<E>,
    op: Operation,
    key: RecordKey,
    observer: &Observer,
) -> EndedThen {
    let max = shared.wait_for_peers.unwrap_or_default();
    tracing::debug!(key = %key.digest, "in progress: waiting for the live run holding it");
    match peers::still_held_after(shared.engine.store(), &key, max).await {
        Ok(false) => {}
        Ok(true) => {
            let note = format!(
                "key {}: still in progress elsewhere after waiting {max:?}",
                key.digest
            );
            return (End::InProgress, Some(note), None);
        }
        Err(e) => {
            let note = format!("key {}: not run: {e}", key.digest);
            return (End::NotRun, Some(note), None);
        }
    }
    let permit = shared
        .permits
        .clone()
        .acquire_owned()
        .await
        .expect("the semaphore is never closed");
    match shared.engine.begin(&op).await {
        Ok(Begin::Execute(execution)) => run_held(shared, op, execution, permit, observer).await,
        // Held again by someone (a peer took it over): the wait is over.
        other => {
            let (end, note) = not_executed(other, key.digest);
            (end, note, None)
        }
    }
}

/// An operation this run does not execute (its key is `key`): how it ended.
fn not_executed(begun: Result<Begin, EngineError>, key: Digest) -> Ended {
    let fate = fate::of_answer(begun, Some(key));
    (fate.end, fate.note)
}

/// Runs the effect of an operation this run holds, gives up its slot, and
/// records its end through the finisher. A lone worker instead records
/// its end in the store call that claims the next pending operation, and
/// keeps its slot for that one.
async fn run_held<E: Effect>(
    shared: &Shared<E>,
    op: Operation,
    execution: crate::engine::Execution,
    permit: OwnedSemaphorePermit,
    observer: &Observer,
) -> EndedThen {
    let (key, lease) = (execution.key_hex(), execution.lease());
    let mut then = None;
    let performed = run_effect_recording(
        &*shared.effect,
        op,
        execution,
        async |execution, ending, outcome| {
            let finish = execution.into_finish(ending, outcome);
            let Some(next) = shared.next_to_pair(&finish) else {
                drop(permit);
                return shared.finisher.record(finish).await;
            };
            // An outage met here is told once; each write then rides it
            // out alone.
            let budget = shared.store_outage;
            let tell = |e: &EngineError| {
                observer(JobEvent::Warning(&format!(
                    "the store is unavailable ({e}) while recording an end and claiming the next operation; trying again for up to {budget:?}"
                )))
            };
            match shared.engine.finish_and_claim(&finish, next).await {
                Ok((finished, claimed)) => {
                    let finish_unavailable =
                        matches!(&finished, Err(e) if e.is_store_unavailable());
                    let next = match claimed.store_unavailable() {
                        Some(e) => {
                            if !finish_unavailable {
                                tell(&EngineError::Store(e.clone()));
                            }
                            Next::Unclaimed(claimed.into_retry())
                        }
                        None => Next::Claimed(claimed),
                    };
                    then = Some((next, permit));
                    match finished {
                        // Sent again alone (recognised if it was recorded).
                        Err(e) if e.is_store_unavailable() => {
                            tell(&e);
                            shared.finisher.record(finish).await
                        }
                        finished => finished,
                    }
                }
                // Neither may be assumed written: each is sent again alone,
                // and recognised if it was (the end by its fence, the claim
                // by its holder token).
                Err((e, next)) => {
                    if e.is_store_unavailable() {
                        tell(&e);
                    }
                    then = Some((Next::Unclaimed(next), permit));
                    shared.finisher.record(finish).await
                }
            }
        },
    )
    .await;
    let fate = fate::of_execution(performed, &key, lease);
    let (end, note) = (fate.end, fate.note);
    (end, note, then)
}
