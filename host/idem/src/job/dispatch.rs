//! The job's main loop: claim what can start now in one store call, run
//! each claimed operation's effect in a task of its own, count the ends.

use std::sync::Arc;

use idem_core::{KeyedDerivation, Operation};
use idem_store::{RecordState, StoreError};
use tokio::sync::Semaphore;
use tokio::task::{JoinError, JoinSet};

use super::effect::{Effect, Performed, run_effect_recording};
use super::event::{JobEvent, Observer};
use super::finisher::Finisher;
use super::summary::{End, Summary};
use crate::engine::{Begin, Claimed, Engine, EngineError};

/// How many operations run at once and how many store calls batch.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub(crate) concurrency: usize,
    pub(crate) claim_batch: usize,
    pub(crate) finish_batch: usize,
}

/// Runs every operation through `effect`, at most `concurrency` at once.
/// Only operations about to start are claimed: a claim's lease runs from
/// the claim, so none waits for a free slot while claimed.
pub(crate) async fn run_all<E: Effect>(
    engine: Arc<Engine>,
    ops: Vec<(Operation, KeyedDerivation)>,
    effect: Arc<E>,
    limits: Limits,
    observer: &Observer,
) -> Summary {
    let permits = Arc::new(Semaphore::new(limits.concurrency));
    let mut tasks = JoinSet::new();
    let finisher = Arc::new(Finisher::start(engine.clone(), limits.finish_batch));
    let mut summary = Summary::default();
    let mut pending = ops.into_iter().peekable();
    while pending.peek().is_some() {
        // Count what has finished so far.
        while let Some(joined) = tasks.try_join_next() {
            count(&mut summary, joined, observer);
        }
        // Wait for one free slot, then take every other free one (up to the
        // batch size): the operations that can start now are claimed
        // together, in one store call.
        let mut held = vec![
            permits
                .clone()
                .acquire_owned()
                .await
                .expect("the semaphore is never closed"),
        ];
        while held.len() < limits.claim_batch {
            match permits.clone().try_acquire_owned() {
                Ok(permit) => held.push(permit),
                Err(_) => break,
            }
        }
        let batch: Vec<_> = pending.by_ref().take(held.len()).collect();
        held.truncate(batch.len());
        let size = batch.len();
        let claimed = match engine.claim_batch(batch).await {
            Ok(claimed) => claimed,
            Err(e) => {
                // None of these started; a re-run finds whatever the store
                // may have claimed before failing (and the policy decides).
                observer(JobEvent::Warning(&format!(
                    "claiming a batch of {size} failed: {e}"
                )));
                for _ in 0..size {
                    ended(&mut summary, End::Unknown, None, observer);
                }
                continue;
            }
        };
        for (claimed, permit) in claimed.into_iter().zip(held) {
            let (engine, finisher, effect) = (engine.clone(), finisher.clone(), effect.clone());
            let observer = observer.clone();
            tasks.spawn(async move {
                let (end, note) = one(&engine, &finisher, claimed, &*effect).await;
                drop(permit);
                // Said as it happens, counted when the main loop collects it.
                observer(JobEvent::Ended {
                    end,
                    note: note.as_deref(),
                });
                end
            });
        }
    }
    while let Some(joined) = tasks.join_next().await {
        count(&mut summary, joined, observer);
    }
    summary
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

/// One claimed operation: settle the claim, run the effect if this run
/// holds it, record its end through the finisher. The note says why, for
/// the ends that deserve a word.
async fn one<E: Effect>(
    engine: &Engine,
    finisher: &Finisher,
    claimed: Claimed,
    effect: &E,
) -> (End, Option<String>) {
    let op = claimed.operation().clone();
    let execution = match engine.begin_claimed(claimed).await {
        Ok(Begin::Execute(e)) => e,
        Ok(Begin::Replay(r)) if r.state == RecordState::Completed => return (End::Replayed, None),
        Ok(Begin::Replay(_)) => return (End::ReplayedFailure, None),
        Ok(Begin::InProgress { .. }) => return (End::InProgress, None),
        Ok(Begin::Conflict { key, reason, .. }) => {
            let note = format!("conflict on key {}: {reason}", key.digest);
            return (End::Conflict, Some(note));
        }
        Ok(Begin::Rejected { key, reason, .. }) => {
            let note = format!("rejected key {}: {reason}", key.digest);
            return (End::Rejected, Some(note));
        }
        Err(EngineError::Store(e @ StoreError::StaleEpoch { .. })) => {
            let note = format!("not run, ownership moved on: {e}");
            return (End::StaleEpoch, Some(note));
        }
        Err(e) => return (End::Unknown, Some(e.to_string())),
    };
    let key = execution.key_hex();
    let performed =
        run_effect_recording(effect, op, execution, async |execution, ending, outcome| {
            finisher.finish(execution, ending, outcome).await
        })
        .await;
    match performed {
        Ok(Performed::Completed) => (End::Executed, None),
        Ok(Performed::Failed { .. }) => (End::Failed, None),
        Ok(Performed::NotStarted { reason }) => (End::Failed, Some(reason)),
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
