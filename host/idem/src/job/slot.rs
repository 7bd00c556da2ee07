//! One slot of the run loop: an operation claimed in its batch, begun
//! (riding out an outage while a duplicate is settled), its effect run
//! while its claim is heartbeated and its source told it is being worked
//! on ([`super::progress`]), its end recorded, and the operation settled at its source as its
//! [`Fate`] says. A lone worker's slot then goes on with the next
//! operation, claimed in the store call that recorded this one's end.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use idem_core::{Digest, Operation};
use idem_store::{ClaimRequest, Finish, RecordKey};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tracing::Instrument;

use super::dispatch::Limits;
use super::effect::{Effect, run_effect_recording};
use super::event::{JobEvent, Observer};
use super::fate::{self, Delay, Fate, Halt, Then};
use super::feed::{Settled, Ticket};
use super::finisher::Finisher;
use super::progress::Progress;
use super::summary::End;
use super::{one, peers};
use crate::engine::{Begin, Engine, EngineError, Execution, FirstClaim, ToClaim, telemetry};

/// What every slot of a run shares.
pub(crate) struct Slots<E, T> {
    pub(crate) engine: Arc<Engine>,
    pub(crate) finisher: Finisher,
    pub(crate) effect: Arc<E>,
    pub(crate) permits: Arc<Semaphore>,
    /// The run's limits. A lone worker (concurrency 1): the slot ending an
    /// operation claims the next pending one in the same store call, and
    /// runs it.
    pub(crate) limits: Limits,
    /// Operations taken that need a claim, in order: they hold no claim
    /// (and no lease) while they wait for a slot.
    pub(crate) pending: Mutex<VecDeque<(ToClaim, T)>>,
    /// The run takes no more operations.
    pub(crate) stopping: AtomicBool,
    /// An outage met while waiting for peers was told (once a run: many
    /// operations may be waiting).
    pub(crate) told_peer_outage: AtomicBool,
    pub(crate) observer: Observer,
    /// The list of operations reported still being worked on, when the
    /// source wants to hear it.
    pub(crate) progress: Option<Arc<Progress<T>>>,
}

impl<E, T> Slots<E, T> {
    /// The operations waiting for a claim.
    pub(crate) fn pending(&self) -> MutexGuard<'_, VecDeque<(ToClaim, T)>> {
        self.pending
            .lock()
            .expect("the pending queue is never poisoned")
    }

    /// No slot takes a pending operation from now on (call it holding
    /// [`Slots::pending`]'s lock, so that none is taken meanwhile).
    pub(crate) fn stop(&self) {
        self.stopping.store(true, Ordering::Release);
    }

    /// The pending operation a lone worker claims with `finish`, if any
    /// may share its store call (see [`Engine::pairs`]).
    fn next_to_pair(&self, finish: &Finish) -> Option<(ToClaim, T)> {
        if self.limits.concurrency != 1 || self.stopping.load(Ordering::Acquire) {
            return None;
        }
        let mut pending = self.pending();
        match pending.front() {
            Some((next, _)) if self.engine.pairs(finish, next) => pending.pop_front(),
            _ => None,
        }
    }

    fn warn(&self, text: &str) {
        (self.observer)(JobEvent::Warning(text));
    }
}

/// The operation a slot goes on with after its own: one claimed together
/// with its own end, or one whose claim must be sent again.
enum Next {
    Claimed(FirstClaim),
    Unclaimed(ToClaim),
}

impl Next {
    fn parts(&self) -> (&Operation, &ClaimRequest) {
        match self {
            Next::Claimed(claimed) => (claimed.operation(), claimed.request()),
            Next::Unclaimed(item) => (item.operation(), item.request()),
        }
    }
}

/// A slot's task: settles `claimed`, then, for a lone worker whose end
/// shared its store call with the next claim, that operation, and so on.
/// Each end is said as it happens; all are counted when the loop collects
/// the task.
pub(crate) async fn run<E: Effect, T: Ticket>(
    slots: &Slots<E, T>,
    claimed: FirstClaim,
    ticket: T,
    permit: OwnedSemaphorePermit,
) -> Vec<(End, Halt)> {
    let mut ends = Vec::with_capacity(1);
    let mut next = Some((Next::Claimed(claimed), ticket, permit));
    while let Some((this, ticket, permit)) = next.take() {
        let span = operation_span(&this, &ticket);
        // Reported still being worked on until settled: what the source
        // does first (a forward to review) keeps the delivery.
        let ticket = Arc::new(ticket);
        let entered = slots.progress.as_ref().map(|p| p.enter(ticket.clone()));
        let work = async {
            let (op, request) = this.parts();
            let (op, key) = (op.clone(), request.key.digest);
            let begun = begin(slots, this).await;
            let (fate, then) = settle(slots, op, key, begun, permit).await;
            (ticket.settle(&slots.engine, fate).await, then)
        };
        let (Settled { end, note, halt }, then) = work.instrument(span.clone()).await;
        drop(entered);
        span.record("idem.end", end.summary_field());
        (slots.observer)(JobEvent::Ended {
            end,
            note: note.as_deref(),
        });
        ends.push((end, halt));
        next = then;
    }
    ends
}

/// The span of one operation of a job or a consumer, around its claim,
/// effect and end (the engine's spans are its children): its key, its run,
/// and for a message where it came from (escaped, bounded).
fn operation_span<T: Ticket>(this: &Next, ticket: &T) -> tracing::Span {
    let (op, request) = this.parts();
    let bounded = |text: &str| idem_core::text::bounded(text, telemetry::MAX_ATTRIBUTE);
    let run = op.run.as_ref();
    let origin = ticket.origin();
    tracing::info_span!(
        "idem.operation",
        idem.namespace = %request.key.namespace,
        idem.key = %request.key.digest,
        idem.run_id = run.map(|r| bounded(&r.run_id)),
        idem.run.attempt = run.map(|r| r.attempt),
        idem.end = tracing::field::Empty,
        "messaging.operation.type" = origin.is_some().then_some("process"),
        idem.message = origin.as_deref().map(bounded),
    )
}

/// Settles what a claim answered for one operation, or claims it alone
/// first (a lone worker's next operation whose shared store call did not
/// claim it). A fresh claim or
/// a final record needs nothing more of the store; an open record may (a
/// take-over, a wait), and while the store is unavailable for that or for
/// the claim, the claim is sent again as the same request, within the
/// outage budget.
async fn begin<E, T>(slots: &Slots<E, T>, next: Next) -> Result<Begin, EngineError> {
    let (item, first, doing) = match next {
        Next::Claimed(claimed) if !claimed.may_call_the_store() => {
            return slots.engine.begin_claimed(claimed).await;
        }
        Next::Claimed(claimed) => (claimed.to_retry(), Some(claimed), "settling a duplicate"),
        Next::Unclaimed(item) => (item, None, "claiming"),
    };
    let budget = slots.limits.store_outage;
    one::settle_riding_out(&slots.engine, item, first, budget, |e| {
        slots.warn(&format!(
            "the store is unavailable ({e}) while {doing}; trying again for up to {budget:?}"
        ))
    })
    .await
}

/// An operation's fate, and the operation its slot goes on with.
type FateThen<T> = (Fate, Option<(Next, T, OwnedSemaphorePermit)>);

/// Settles one begun operation: runs the effect if this run holds it, and
/// with `wait_for_peers`, waits for one a live peer holds and begins it
/// again. Gives up its slot (`permit`) when it starts waiting, or when its
/// effect is over (before its end is recorded unless the run holds slots
/// until then) or its end recorded.
async fn settle<E: Effect, T>(
    slots: &Slots<E, T>,
    op: Operation,
    key: Digest,
    begun: Result<Begin, EngineError>,
    permit: OwnedSemaphorePermit,
) -> FateThen<T> {
    match begun {
        Ok(Begin::InProgress { key, .. }) if slots.limits.wait_for_peers.is_some() => {
            drop(permit);
            wait_for_peer(slots, op, key).await
        }
        Ok(Begin::Execute(execution)) => run_held(slots, op, execution, permit).await,
        other => (fate::of_answer(other, Some(key)), None),
    }
}

/// Waits (holding no slot) until the peer holding `key` ends its claim,
/// then takes a slot and begins the operation again: a replay, or what the
/// policy decides for a failure or a lapsed claim. It is derived again, as
/// [`Engine::begin`] does (during a policy's dual-read window the first
/// claim may have found the old version's key), and both the watching and
/// the new claim ride out an outage within the run's budget, told once per
/// run. (An operation taken before the run stopped is settled this way
/// even after: it was taken, and its claim is made as any other.)
async fn wait_for_peer<E: Effect, T>(
    slots: &Slots<E, T>,
    op: Operation,
    key: RecordKey,
) -> FateThen<T> {
    let max = slots.limits.wait_for_peers.unwrap_or_default();
    let budget = slots.limits.store_outage;
    tracing::debug!(key = %key.digest, "in progress: waiting for the live run holding it");
    let waiting = |e: &dyn std::fmt::Display| {
        if !slots.told_peer_outage.swap(true, Ordering::Relaxed) {
            slots.warn(&format!(
                "the store is unavailable ({e}) while waiting for peers; trying again for up to {budget:?}"
            ))
        }
    };
    let watched = peers::still_held_after(slots.engine.store(), &key, max, budget, |e| waiting(e));
    match watched.await {
        Ok(false) => {}
        Ok(true) => {
            let fate = Fate::new(End::InProgress, Then::Later(Delay::Hint(None))).noted(format!(
                "key {}: still in progress elsewhere after waiting {max:?}",
                key.digest
            ));
            return (fate, None);
        }
        Err(e) => {
            return (
                fate::of_error(EngineError::Store(e), Some(key.digest)),
                None,
            );
        }
    }
    let permit = slots
        .permits
        .clone()
        .acquire_owned()
        .await
        .expect("the semaphore is never closed");
    let begun = one::begin_riding_out(&slots.engine, &op, budget, |e| waiting(e)).await;
    match begun {
        Ok(Begin::Execute(execution)) => run_held(slots, op, execution, permit).await,
        // Held again by someone (a peer took it over): the wait is over.
        other => (fate::of_answer(other, Some(key.digest)), None),
    }
}

/// Runs the effect of an operation this run holds, gives up its slot, and
/// records its end through the finisher. A lone worker instead records
/// its end in the store call that claims the next pending operation, and
/// keeps its slot for that one.
async fn run_held<E: Effect, T>(
    slots: &Slots<E, T>,
    op: Operation,
    execution: Execution,
    permit: OwnedSemaphorePermit,
) -> FateThen<T> {
    let (key, lease) = (execution.key_hex(), execution.lease());
    let mut then = None;
    let performed = run_effect_recording(
        &*slots.effect,
        op,
        execution,
        async |execution, ending, outcome| {
            let finish = execution.into_finish(ending, outcome);
            let Some((next, ticket)) = slots.next_to_pair(&finish) else {
                // See `Limits::hold_until_recorded`.
                let held = slots.limits.hold_until_recorded.then_some(permit);
                let recorded = slots.finisher.record(finish).await;
                drop(held);
                return recorded;
            };
            // An outage met here is told once; each write then rides it
            // out alone.
            let budget = slots.limits.store_outage;
            let tell = |e: &EngineError| {
                slots.warn(&format!(
                    "the store is unavailable ({e}) while recording an end and claiming the next operation; trying again for up to {budget:?}"
                ))
            };
            match slots.engine.finish_and_claim(&finish, next).await {
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
                    then = Some((next, ticket, permit));
                    match finished {
                        // Sent again alone (recognised if it was recorded).
                        Err(e) if e.is_store_unavailable() => {
                            tell(&e);
                            slots.finisher.record(finish).await
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
                    then = Some((Next::Unclaimed(next), ticket, permit));
                    slots.finisher.record(finish).await
                }
            }
        },
    )
    .await;
    (fate::of_execution(performed, &key, lease), then)
}
