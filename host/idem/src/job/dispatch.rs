//! The one run loop, under `idem run`, `idem consume` and the library's
//! [`super::JobRunner`] and [`crate::consume::consume`]: take operations
//! from a [`Feed`], claim what can start now in one store call, run each
//! claimed operation in a slot of its own ([`super::slot`]), and count
//! every end once, as its source settled it.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use idem_core::{Operation, RunContext};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::{JoinError, JoinSet};

use super::effect::Effect;
use super::event::{JobEvent, Observer};
use super::fate::{self, Delay, Fate, Halt, Then};
use super::feed::{Feed, Input, Pulled, Settled, Ticket};
use super::finisher::Finisher;
use super::outage;
use super::ownership::Ownership;
use super::progress::Progress;
use super::slot::{self, Slots};
use super::summary::{End, Outage, Summary};
use crate::engine::{Engine, EngineError, FirstClaim, ToClaim};

/// How many operations run at once, how many store calls batch, how long
/// an operation a peer holds is waited for, and what a raw operation gets.
#[derive(Debug, Clone)]
pub(crate) struct Limits {
    pub(crate) concurrency: usize,
    pub(crate) claim_batch: usize,
    pub(crate) finish_batch: usize,
    pub(crate) wait_for_peers: Option<Duration>,
    pub(crate) store_outage: Duration,
    /// The run an operation read from JSON belongs to when it names none.
    pub(crate) run: Option<RunContext>,
    /// This member's share, for operations read from JSON.
    pub(crate) ownership: Option<Ownership>,
    /// Keep a slot until its operation's end is recorded. A job frees it
    /// when the effect is over, so that the next claims overlap the
    /// recording; a consumer keeps it, so that a consumer killed leaves no
    /// more claims to lapse (and wait in review) than it has slots.
    pub(crate) hold_until_recorded: bool,
}

/// Runs every operation `feed` gives through `effect`, at most
/// `concurrency` at once, until the feed ends, `shutdown` resolves or a
/// settled operation halts the run; returns the tally and how many
/// operations it took. Only operations about to start are claimed: a
/// claim's lease runs from the claim, so none waits for a free slot while
/// claimed. `observer` must escape what it shows ([`escaping`]): notes and
/// warnings carry what operations and publishers sent.
pub(crate) async fn run_all<F: Feed, E: Effect>(
    engine: Arc<Engine>,
    mut feed: F,
    effect: Arc<E>,
    limits: Limits,
    observer: &Observer,
    shutdown: impl Future<Output = ()>,
) -> (Summary, u64) {
    let permits = Arc::new(Semaphore::new(limits.concurrency.max(1)));
    let progress = feed.progress_every().map(Progress::start);
    let slots = Arc::new(Slots {
        finisher: Finisher::start(engine.clone(), limits.finish_batch, limits.store_outage),
        engine: engine.clone(),
        effect,
        permits: permits.clone(),
        limits: limits.clone(),
        pending: Default::default(),
        stopping: Default::default(),
        told_peer_outage: Default::default(),
        observer: observer.clone(),
        progress: progress.as_ref().map(|(list, _)| list.clone()),
    });
    let mut shutdown = std::pin::pin!(shutdown);
    let mut tasks: JoinSet<Vec<(End, Halt)>> = JoinSet::new();
    let mut run = Run {
        summary: Summary::default(),
        observer,
        budget: limits.store_outage,
    };
    let mut taken: u64 = 0;
    loop {
        while let Some(joined) = tasks.try_join_next() {
            run.count_task(joined);
        }
        if run.halted() {
            break;
        }
        if F::READS_AHEAD && slots.pending().is_empty() {
            // What is already done settles now, from one read, without a
            // slot or a claim; the rest waits for a slot.
            let pulled = tokio::select! {
                pulled = feed.pull(limits.claim_batch, !tasks.is_empty()) => pulled,
                () = &mut shutdown => break,
            };
            let Some(ahead) = run.take(&engine, pulled, &limits, &mut taken).await else {
                break;
            };
            let left = run.settle_ahead(&engine, ahead).await;
            slots.pending().extend(left);
            continue;
        }
        // Wait for one free slot, then take every other free one (up to the
        // batch size): the operations that can start now are claimed
        // together, in one store call.
        let mut held: Vec<OwnedSemaphorePermit> = vec![tokio::select! {
            permit = permits.clone().acquire_owned() => permit.expect("the semaphore is never closed"),
            () = &mut shutdown => break,
        }];
        while held.len() < limits.claim_batch
            && let Ok(permit) = permits.clone().try_acquire_owned()
        {
            held.push(permit);
        }
        if !F::READS_AHEAD && slots.pending().is_empty() {
            let pulled = tokio::select! {
                pulled = feed.pull(held.len(), !tasks.is_empty()) => pulled,
                () = &mut shutdown => break,
            };
            let Some(fetched) = run.take(&engine, pulled, &limits, &mut taken).await else {
                break;
            };
            slots.pending().extend(fetched);
        }
        let batch: Vec<(ToClaim, F::Ticket)> = {
            let mut pending = slots.pending();
            // A lone worker's task may have claimed them all meanwhile.
            let n = held.len().min(pending.len());
            pending.drain(..n).collect()
        };
        if batch.is_empty() {
            continue;
        }
        let (claimed, gave_up) = claim_riding_out(&engine, batch, &limits, observer).await;
        // What the store did claim (or answered with a record) goes on, even
        // when the rest could not be claimed: those claims are live.
        let mut held = held.into_iter();
        for (claimed, ticket) in claimed {
            let permit = held.next().expect("a permit per operation of the batch");
            let slots = slots.clone();
            tasks.spawn(async move { slot::run(&slots, claimed, ticket, permit).await });
        }
        let Some((why, left)) = gave_up else {
            continue;
        };
        // None of these started, so none of their effects happened; a claim
        // the store may have made before failing is found by the next run
        // (and the policy decides).
        let unavailable = why.error.is_store_unavailable();
        if unavailable {
            // Past the outage budget: take no more operations. The effects
            // already running go on, their ends recorded if the store comes
            // back in time.
            let told = format!("{}; stopped taking operations", outage::describe(&why));
            observer(JobEvent::Warning(&told));
            run.summary.outage = Some(Outage {
                lasted_ms: why.lasted.as_millis() as u64,
                error: why.error.to_string(),
            });
        } else {
            observer(JobEvent::Warning(&format!(
                "claiming a batch of {} failed: {}; not run",
                left.len(),
                why.error
            )));
        }
        // Not run, whatever the call's error: a whole batch failed, so no
        // one operation is to blame; the warning said why, once. What the
        // error says of the run (an outage, a store no operation can get
        // past) still holds.
        let Fate { then, halt, .. } = fate::of_error(why.error, None);
        let then = match halt {
            // Put back at once, for a consumer that can.
            Halt::Stop(_) | Halt::Record(_) => then,
            _ => Then::Later(Delay::Retry),
        };
        let fate = Fate {
            halt,
            ..Fate::new(End::NotRun, then)
        };
        for ticket in left {
            run.settle(&engine, &ticket, fate.again()).await;
        }
    }
    // Read ahead but never claimed: not run. Said under the queue's lock, so
    // a lone worker's task takes none of them after this.
    let left: Vec<(ToClaim, F::Ticket)> = {
        let mut pending = slots.pending();
        slots.stop();
        pending.drain(..).collect()
    };
    for (_, ticket) in left {
        let fate = Fate::new(End::NotRun, Then::Later(Delay::Retry));
        run.settle(&engine, &ticket, fate).await;
    }
    feed.close().await;
    while let Some(joined) = tasks.join_next().await {
        run.count_task(joined);
    }
    if let Some((_, keeper)) = progress {
        keeper.abort();
    }
    (run.summary, taken)
}

/// The tally of a run, and what settles the operations the loop itself
/// answers.
struct Run<'a> {
    summary: Summary,
    observer: &'a Observer,
    /// The store's outage budget.
    budget: Duration,
}

impl Run<'_> {
    /// Whether a settled operation (or the loop) stopped the run.
    fn halted(&self) -> bool {
        self.summary.outage.is_some() || self.summary.stopped.is_some() || self.summary.deposed
    }

    /// The operations pulled (counted in `taken`) made ready to claim:
    /// what came as JSON read and derived (given `limits.run` when it names
    /// none), kept when this member owns it, each with its claim request;
    /// what cannot be claimed settled now. `None` when the feed ended (what
    /// it says of its end counted).
    async fn take<T: Ticket>(
        &mut self,
        engine: &Engine,
        pulled: Pulled<T>,
        limits: &Limits,
        taken: &mut u64,
    ) -> Option<Vec<(ToClaim, T)>> {
        match pulled {
            Pulled::Taken(inputs) => {
                *taken += inputs.len() as u64;
                let mut ready = Vec::with_capacity(inputs.len());
                for (input, ticket) in inputs {
                    match derived(engine, input, limits) {
                        Ok(derived) => ready.push((engine.to_claim(derived), ticket)),
                        Err(fate) => self.settle(engine, &ticket, fate).await,
                    }
                }
                Some(ready)
            }
            Pulled::End(finale) => {
                if self.summary.outage.is_none() {
                    self.summary.outage = finale.outage;
                }
                self.summary.unacknowledged += finale.unacknowledged;
                None
            }
        }
    }

    /// Counts an end its source settled, and what it says of the run.
    fn count(&mut self, end: End, halt: Halt) {
        self.summary.count(end);
        match halt {
            Halt::No => {}
            Halt::Outage(error) => {
                // Met by an operation's own call, which rode out the whole
                // budget before giving up.
                if self.summary.outage.is_none() {
                    (self.observer)(JobEvent::Warning(&format!(
                        "the store was unavailable past the outage budget ({error}); stopped taking operations"
                    )));
                    self.summary.outage = Some(Outage {
                        lasted_ms: self.budget.as_millis() as u64,
                        error,
                    });
                }
            }
            Halt::Stop(why) | Halt::Record(why) => {
                if self.summary.stopped.is_none() {
                    (self.observer)(JobEvent::Warning(&format!("{why}: stopped")));
                    self.summary.stopped = Some(why);
                }
            }
            Halt::Deposed => {
                if !self.summary.deposed {
                    (self.observer)(JobEvent::Warning(
                        "the ownership group's membership moved on (another member joined with \
                         another list): this member is deposed; stopped",
                    ));
                    self.summary.deposed = true;
                }
            }
        }
    }

    /// Counts a finished task's operations (each reported by the task); a
    /// task that panicked is an operation whose outcome is unknown.
    fn count_task(&mut self, joined: Result<Vec<(End, Halt)>, JoinError>) {
        match joined {
            Ok(ends) => ends
                .into_iter()
                .for_each(|(end, halt)| self.count(end, halt)),
            Err(e) => {
                tracing::error!(error = %e, "operation task failed");
                (self.observer)(JobEvent::Ended {
                    end: End::Unknown,
                    note: None,
                });
                self.summary.count(End::Unknown);
            }
        }
    }

    /// Settles at its source an operation the loop itself answered, and
    /// reports and counts it.
    async fn settle<T: Ticket>(&mut self, engine: &Engine, ticket: &T, fate: Fate) {
        let Settled { end, note, halt } = ticket.settle(engine, fate).await;
        (self.observer)(JobEvent::Ended {
            end,
            note: note.as_deref(),
        });
        self.count(end, halt);
    }

    /// Settles the operations of `ahead` whose records are final now (one
    /// read: `Engine::settle_ahead`) and returns the rest, in order, for a
    /// claim. A read that fails settles nothing: every operation is
    /// claimed, which rides out an outage as always.
    async fn settle_ahead<T: Ticket>(
        &mut self,
        engine: &Engine,
        ahead: Vec<(ToClaim, T)>,
    ) -> Vec<(ToClaim, T)> {
        let (items, tickets): (Vec<ToClaim>, Vec<T>) = ahead.into_iter().unzip();
        let answers = match engine.settle_ahead(&items).await {
            Ok(answers) => answers,
            Err(e) => {
                tracing::debug!(error = %e, "the look-ahead read failed; claiming instead");
                return items.into_iter().zip(tickets).collect();
            }
        };
        let mut left = Vec::new();
        for ((item, ticket), answer) in items.into_iter().zip(tickets).zip(answers) {
            match answer {
                Some(begun) => {
                    let key = item.request().key.digest;
                    self.settle(engine, &ticket, fate::of_answer(begun, Some(key)))
                        .await;
                }
                None => left.push((item, ticket)),
            }
        }
        left
    }
}

/// An input's operation and derivation, or its fate when it cannot be
/// claimed: not an operation, not derivable, or another member's.
// Either is moved on at once, once per operation: the size costs nothing.
#[allow(clippy::result_large_err)]
fn derived(
    engine: &Engine,
    input: Input,
    limits: &Limits,
) -> Result<(Operation, idem_core::KeyedDerivation), Fate> {
    let json = match input {
        Input::Keyed(op, keyed) => return Ok((op, keyed)),
        Input::Json(json) => json,
    };
    let bounds = engine.policy().limits().operation;
    let mut op = Operation::from_slice(&json, &bounds).map_err(|e| {
        Fate::new(End::Refused, Then::Refused).noted(format!("refused: not an operation ({e})"))
    })?;
    if op.run.is_none() {
        op.run = limits.run.clone();
    }
    let keyed = engine.derive(&op).map_err(|e| fate::of_error(e, None))?;
    if let Some(o) = &limits.ownership
        && !idem_core::ownership::owns(&keyed.partition, &o.member, &o.members)
    {
        return Err(Fate::new(End::NotOwned, Then::Later(Delay::Elsewhere)));
    }
    Ok((op, keyed))
}

/// Claims `batch` in one store call, trying again while the store is
/// unavailable, up to the outage budget (see [`outage`]): the whole call,
/// or the operations whose own claim the store could not make. Each
/// request is made once (`Engine::to_claim`): sent again, it carries the
/// same holder token, so a claim that committed while its answer was lost
/// is found to be this one (see `idem_store::HolderToken`).
async fn claim_riding_out<T>(
    engine: &Engine,
    batch: Vec<(ToClaim, T)>,
    limits: &Limits,
    observer: &Observer,
) -> outage::Served<FirstClaim, T> {
    let budget = limits.store_outage;
    outage::batch_riding_out(
        budget,
        batch,
        |items: Vec<ToClaim>| async move {
            let asked = items.len();
            engine.claim_batch_keeping(items).await.map_err(|(e, back)| {
                // A call handing back all it was asked can be sent again.
                let whole = back.len() == asked;
                (e, whole.then_some(back))
            })
        },
        |claimed: FirstClaim| match claimed.store_unavailable() {
            Some(e) => outage::Answer::Again(EngineError::Store(e.clone()), claimed.into_retry()),
            None => outage::Answer::Served(claimed),
        },
        |e| observer(JobEvent::Warning(&format!(
            "the store is unavailable ({e}); trying again for up to {budget:?} while the effects already running go on"
        ))),
    )
    .await
}

/// `observer`, hearing every note and warning escaped: they carry what
/// operations and publishers sent (field values, reasons, message ids).
pub(crate) fn escaping(observer: Observer) -> Observer {
    use idem_core::text::escaped;
    Arc::new(move |event| match event {
        JobEvent::Ended {
            end,
            note: Some(note),
        } => observer(JobEvent::Ended {
            end,
            note: Some(&escaped(note)),
        }),
        JobEvent::Warning(text) => observer(JobEvent::Warning(&escaped(text))),
        other => observer(other),
    })
}
