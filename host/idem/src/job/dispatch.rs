//! The job's main loop: claim what can start now in one store call, run
//! each claimed operation's effect in a task of its own, count the ends.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use idem_core::{Digest, Operation};
use idem_store::{RecordKey, RecordState, StoreError};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio::task::{JoinError, JoinSet};

use super::effect::{Effect, Performed, run_effect_recording};
use super::event::{JobEvent, Observer};
use super::feed::Fed;
use super::finisher::Finisher;
use super::peers;
use super::summary::{End, Outage, Summary};
use super::{one, outage};
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
    });
    let mut summary = Summary::default();
    let mut taken: u64 = 0;
    // Operations read ahead that need a claim, in order: they hold no
    // claim (and no lease) while they wait for a slot.
    let mut pending: VecDeque<ToClaim> = VecDeque::new();
    loop {
        // Count what has finished so far.
        while let Some(joined) = tasks.try_join_next() {
            count(&mut summary, joined, observer);
        }
        if pending.is_empty() {
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
            settle_ahead(&engine, ahead, &mut pending, &mut summary, observer).await;
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
        while held.len() < limits.claim_batch.min(pending.len()) {
            match permits.clone().try_acquire_owned() {
                Ok(permit) => held.push(permit),
                Err(_) => break,
            }
        }
        let batch: Vec<ToClaim> = pending.drain(..held.len()).collect();
        let (claimed, gave_up) =
            claim_riding_out(&engine, batch, limits.store_outage, observer).await;
        // What the store did claim (or answered with a record) goes on, even
        // when the rest could not be claimed: those claims are live.
        let mut held = held.into_iter();
        for claimed in claimed {
            let permit = held.next().expect("a permit per operation of the batch");
            let shared = shared.clone();
            let observer = observer.clone();
            tasks.spawn(async move {
                let op = claimed.operation().clone();
                let key = claimed.key();
                let begun = begin(&shared, claimed, &observer).await;
                let (end, note) = settle(&shared, op, key, begun, permit).await;
                // Said as it happens, counted when the main loop collects it.
                observer(JobEvent::Ended {
                    end,
                    note: note.as_deref(),
                });
                end
            });
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
    for _ in pending.drain(..) {
        ended(&mut summary, End::NotRun, None, observer);
    }
    while let Some(joined) = tasks.join_next().await {
        count(&mut summary, joined, observer);
    }
    (summary, taken)
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
/// read: `Engine::settle_ahead`) and queues the rest, in order, for a
/// claim. A read that fails settles nothing: every operation is claimed,
/// which rides out an outage as always.
async fn settle_ahead(
    engine: &Engine,
    ahead: Vec<ToClaim>,
    pending: &mut VecDeque<ToClaim>,
    summary: &mut Summary,
    observer: &Observer,
) {
    let answers = match engine.settle_ahead(&ahead).await {
        Ok(answers) => answers,
        Err(e) => {
            tracing::debug!(error = %e, "the look-ahead read failed; claiming instead");
            pending.extend(ahead);
            return;
        }
    };
    for (item, answer) in ahead.into_iter().zip(answers) {
        match answer {
            Some(begun) => {
                let (end, note) = not_executed(begun, item.request().key.digest);
                ended(summary, end, note.as_deref(), observer);
            }
            None => pending.push_back(item),
        }
    }
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

/// Counts a finished task's operation (already reported by the task); a
/// task that panicked is an operation whose outcome is unknown.
fn count(summary: &mut Summary, joined: Result<End, JoinError>, observer: &Observer) {
    match joined {
        Ok(end) => summary.count(end),
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
) -> Ended {
    match begun {
        Ok(Begin::InProgress { key, .. }) if shared.wait_for_peers.is_some() => {
            drop(permit);
            wait_for_peer(shared, op, key).await
        }
        Ok(Begin::Execute(execution)) => run_held(shared, op, execution, permit).await,
        other => not_executed(other, key),
    }
}

/// Waits (holding no slot) until the peer holding `key` ends its claim,
/// then takes a slot and begins the operation again: a replay, or what the
/// policy decides for a failure or a lapsed claim.
async fn wait_for_peer<E: Effect>(shared: &Shared<E>, op: Operation, key: RecordKey) -> Ended {
    let max = shared.wait_for_peers.unwrap_or_default();
    tracing::debug!(key = %key.digest, "in progress: waiting for the live run holding it");
    match peers::still_held_after(shared.engine.store(), &key, max).await {
        Ok(false) => {}
        Ok(true) => {
            let note = format!(
                "key {}: still in progress elsewhere after waiting {max:?}",
                key.digest
            );
            return (End::InProgress, Some(note));
        }
        Err(e) => {
            return (
                End::NotRun,
                Some(format!("key {}: not run: {e}", key.digest)),
            );
        }
    }
    let permit = shared
        .permits
        .clone()
        .acquire_owned()
        .await
        .expect("the semaphore is never closed");
    match shared.engine.begin(&op).await {
        Ok(Begin::Execute(execution)) => run_held(shared, op, execution, permit).await,
        // Held again by someone (a peer took it over): the wait is over.
        other => not_executed(other, key.digest),
    }
}

/// An operation this run does not execute (its key is `key`): how it ended.
fn not_executed(begun: Result<Begin, EngineError>, key: Digest) -> Ended {
    match begun {
        Ok(Begin::Execute(_)) => unreachable!("executions are run, not reported"),
        Ok(Begin::Replay(r)) if r.state == RecordState::Completed => (End::Replayed, None),
        Ok(Begin::Replay(_)) => (End::ReplayedFailure, None),
        Ok(Begin::InProgress { .. }) => (End::InProgress, None),
        Ok(Begin::Conflict { key, reason, .. }) => {
            let note = format!("conflict on key {}: {reason}", key.digest);
            (End::Conflict, Some(note))
        }
        Ok(Begin::Rejected {
            key,
            reason,
            marked_unknown: true,
            ..
        }) => {
            let note = format!("sent key {} to review: {reason}", key.digest);
            (End::SentToReview, Some(note))
        }
        Ok(Begin::Rejected { key, reason, .. }) => {
            let note = format!("rejected key {}: {reason}", key.digest);
            (End::Rejected, Some(note))
        }
        Err(EngineError::Store(e @ StoreError::StaleEpoch { .. })) => {
            let note = format!("not run, ownership moved on: {e}");
            (End::StaleEpoch, Some(note))
        }
        Err(e @ EngineError::Policy(_)) => (
            End::PolicyFailed,
            Some(format!("key {key}: on a duplicate, {e}")),
        ),
        // No execution, so the effect never started: not run.
        Err(e) => (End::NotRun, Some(format!("key {key}: not run: {e}"))),
    }
}

/// Runs the effect of an operation this run holds, gives up its slot, and
/// records its end through the finisher.
async fn run_held<E: Effect>(
    shared: &Shared<E>,
    op: Operation,
    execution: crate::engine::Execution,
    permit: OwnedSemaphorePermit,
) -> Ended {
    let key = execution.key_hex();
    let finisher = &shared.finisher;
    let performed = run_effect_recording(
        &*shared.effect,
        op,
        execution,
        async |execution, ending, outcome| {
            drop(permit);
            finisher.finish(execution, ending, outcome).await
        },
    )
    .await;
    match performed {
        Ok(Performed::Completed) => (End::Executed, None),
        Ok(Performed::Failed { .. }) => (End::Failed, None),
        Ok(Performed::NotStarted { reason }) => (End::Failed, Some(format!("key {key}: {reason}"))),
        Ok(Performed::Unknown { reason }) => (
            End::Unknown,
            Some(format!("key {key}: {reason}; outcome unknown")),
        ),
        Err(EngineError::Fenced(e)) => (
            End::Fenced,
            Some(format!("deposed while running; result not recorded: {e}")),
        ),
        Err(e) => (End::Unknown, Some(e.to_string())),
    }
}
