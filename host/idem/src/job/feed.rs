//! What the one run loop ([`super::dispatch`]) is fed, whatever the source
//! of the operations: a [`Feed`] hands it operations, each with a
//! [`Ticket`] through which the source is told that operation's end and
//! settles it its own way (a job's file: nothing to do; a broker's
//! delivery: acknowledged, put off or terminated). The loop derives what is
//! not derived yet, claims, runs the effects, records the ends, rides out
//! outages and counts the summary, the same for every source; a new source
//! is a new `Feed` and nothing else.
//!
//! A job's own feed is here too: the second read of its operations, on a
//! blocking thread, each one checked against the first read
//! ([`super::plan`]) and handed over with the derivation the first read
//! made, through a bounded channel, so no more than a channel's worth is
//! ever held. The policy is not called again.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use idem_core::{KeyedDerivation, Operation};
use tokio::sync::mpsc;

use super::fate::{Fate, Halt};
use super::plan::Plan;
use super::source::{OperationSource, SourceItem};
use super::summary::{End, Outage};
use crate::engine::Engine;

/// One operation as a source hands it over.
// A source hands over one kind only, a fetch's worth or a batch at a time:
// the space a small variant leaves unused is never much.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Input {
    /// Read and derived already (a job's, checked before anything ran).
    Keyed(Operation, KeyedDerivation),
    /// Operation JSON as it came (a message body): the loop reads it,
    /// derives it, and keeps it only if this member owns its partition.
    Json(Vec<u8>),
}

/// What asking a feed for operations gave.
pub(crate) enum Pulled<T> {
    /// Operations, in order (possibly none: nothing came this time).
    Taken(Vec<(Input, T)>),
    /// Nothing more comes: the run ends once what runs is settled.
    End(Finale),
}

/// What a feed that ended adds to the summary.
#[derive(Debug, Default)]
pub(crate) struct Finale {
    /// It gave up on its broker, unavailable past the outage budget.
    pub(crate) outage: Option<Outage>,
    /// Deliveries it left unsettled at the broker when it stopped idle.
    pub(crate) unacknowledged: u64,
}

/// A source of operations for the run loop.
pub(crate) trait Feed: Send {
    /// How one operation is settled at its source.
    type Ticket: Ticket;

    /// Whether operations are taken ahead of the free slots. A job's file
    /// is: what is already done settles from one read, without a slot,
    /// and the next batch is ready when a slot frees. A broker's are not:
    /// a delivery's redelivery timer runs from its fetch, so a fetch takes
    /// only as many as can start at once.
    const READS_AHEAD: bool;

    /// Up to `max` operations (at least one unless nothing came in the
    /// source's own wait, or it ended). `busy`: effects are still running
    /// (a source that stops when idle waits for them).
    fn pull(&mut self, max: usize, busy: bool)
    -> impl Future<Output = Pulled<Self::Ticket>> + Send;

    /// The run stops taking operations: hand back what was read ahead and
    /// not given out.
    fn close(&mut self) -> impl Future<Output = ()> + Send {
        async {}
    }

    /// How often an operation taken from this feed is reported still being
    /// worked on ([`Ticket::in_progress`]), from its claim until it is
    /// settled (JetStream's `+WPI`), so that a long effect keeps its
    /// delivery; `None`: never.
    fn progress_every(&self) -> Option<Duration> {
        None
    }
}

/// How one operation's source settles it, once its fate is known.
pub(crate) trait Ticket: Send + Sync + 'static {
    /// Still being worked on.
    fn in_progress(&self) -> impl Future<Output = ()> + Send {
        async {}
    }

    /// Where the operation came from, for its span: a message's
    /// description, escaped ("ORDERS #42"); `None` for a job's line.
    fn origin(&self) -> Option<String> {
        None
    }

    /// Settles the operation at its source as `fate` says, and says how
    /// it ends for the run: its end, a note, and whether the run goes on.
    fn settle(&self, engine: &Engine, fate: Fate) -> impl Future<Output = Settled> + Send;
}

/// An operation settled at its source.
pub(crate) struct Settled {
    /// How it counts.
    pub(crate) end: End,
    /// Why, for the ends that deserve a word.
    pub(crate) note: Option<String>,
    /// Whether the run goes on.
    pub(crate) halt: Halt,
}

/// A job's operation: read again from a file or a list, it has nothing to
/// settle. An outage past the budget, or a store or policy no operation
/// can use (an operation not run, halting), stops the job as it stops a
/// consumer. What one operation meets does not: a record that cannot be
/// read, or an effect that could not start (the effect's to say for each
/// operation: a library's effect may fail one and run the next); the job
/// counts it and goes on.
pub(crate) struct Read;

impl Ticket for Read {
    async fn settle(&self, _: &Engine, fate: Fate) -> Settled {
        let halt = match fate.halt {
            Halt::Stop(_) if fate.end != End::NotRun => Halt::No,
            Halt::Record(_) => Halt::No,
            halt => halt,
        };
        Settled {
            end: fate.end,
            note: fate.note,
            halt,
        }
    }
}

/// A job's feed: the second read of its operations.
pub(crate) struct SecondRead(mpsc::Receiver<(Operation, KeyedDerivation)>);

impl Feed for SecondRead {
    type Ticket = Read;
    const READS_AHEAD: bool = true;

    async fn pull(&mut self, max: usize, _busy: bool) -> Pulled<Read> {
        // At least one, waiting for the read if need be; more if ready.
        let Some((op, keyed)) = self.0.recv().await else {
            return Pulled::End(Finale::default());
        };
        let mut taken = vec![(Input::Keyed(op, keyed), Read)];
        while taken.len() < max {
            match self.0.try_recv() {
                Ok((op, keyed)) => taken.push((Input::Keyed(op, keyed), Read)),
                Err(_) => break,
            }
        }
        Pulled::Taken(taken)
    }
}

/// Starts the second read; it ends when every planned operation was sent,
/// the loop hung up, or the source no longer matches the plan (then it
/// says how, and the loop counts what it never took not run).
pub(crate) fn start(
    source: Arc<dyn OperationSource>,
    plan: Plan,
    capacity: usize,
) -> (SecondRead, tokio::task::JoinHandle<Result<(), String>>) {
    let (tx, rx) = mpsc::channel(capacity.max(1));
    let handle = tokio::task::spawn_blocking(move || feed(&*source, &plan, &tx));
    (SecondRead(rx), handle)
}

fn feed(
    source: &dyn OperationSource,
    plan: &Plan,
    tx: &mpsc::Sender<(Operation, KeyedDerivation)>,
) -> Result<(), String> {
    let read = source
        .read()
        .map_err(|e| format!("cannot read the operations again: {e}"))?;
    let changed = |why: &str| format!("the operations changed since they were checked: {why}");
    let (mut sent, mut valid) = (0usize, 0u64);
    for SourceItem {
        position,
        operation,
    } in read
    {
        if plan.is_skipped(position) {
            continue;
        }
        let at = |why: &str| changed(&format!("at {position}, {why}"));
        if valid >= plan.valid() {
            return Err(at("an entry that was not there"));
        }
        valid += 1;
        if !plan.owns(valid - 1) {
            continue;
        }
        let op = operation.map_err(|e| at(&e.error))?;
        let keyed = plan
            .derivation(sent, &op)
            .ok_or_else(|| at("a different operation"))?;
        if tx.blocking_send((op, keyed)).is_err() {
            // The loop stopped taking operations; it knows why.
            return Ok(());
        }
        sent += 1;
    }
    if sent < plan.to_run() {
        return Err(changed("fewer than before"));
    }
    Ok(())
}
