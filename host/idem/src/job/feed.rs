//! The second read of a job's operations, on a blocking thread: each
//! operation this worker runs is checked against the first read
//! ([`super::plan`]) and handed to the dispatcher with the derivation the
//! first read made, through a bounded channel, so no more than a channel's
//! worth is ever held. The policy is not called again.

use std::sync::Arc;

use idem_core::{KeyedDerivation, Operation};
use tokio::sync::mpsc;

use super::plan::Plan;
use super::source::{OperationSource, SourceItem};

/// What the dispatcher is fed: an operation and its derivation.
pub(crate) type Fed = (Operation, KeyedDerivation);

/// How the second read ended.
#[derive(Debug, Default)]
pub(crate) struct FeedEnd {
    /// Why it stopped before handing over every planned operation (the
    /// source changed since the first read), and how many it did not.
    pub(crate) stopped: Option<(u64, String)>,
}

/// Starts the second read; it ends when every planned operation was sent,
/// the dispatcher hung up, or the source no longer matches the plan.
pub(crate) fn start(
    source: Arc<dyn OperationSource>,
    plan: Plan,
    capacity: usize,
) -> (mpsc::Receiver<Fed>, tokio::task::JoinHandle<FeedEnd>) {
    let (tx, rx) = mpsc::channel(capacity.max(1));
    let handle = tokio::task::spawn_blocking(move || feed(&*source, &plan, &tx));
    (rx, handle)
}

fn feed(source: &dyn OperationSource, plan: &Plan, tx: &mpsc::Sender<Fed>) -> FeedEnd {
    let planned = plan.to_run() as u64;
    let mut sent: u64 = 0;
    let stop = |sent: u64, why: String| FeedEnd {
        stopped: Some((planned - sent, why)),
    };
    let read = match source.read() {
        Ok(read) => read,
        Err(e) => return stop(sent, format!("cannot read the operations again: {e}")),
    };
    let mut valid: u64 = 0;
    for SourceItem {
        position,
        operation,
    } in read
    {
        if plan.is_skipped(position) {
            continue;
        }
        let changed = |why: &str| {
            format!("the operations changed since they were checked: at {position}, {why}")
        };
        if valid >= plan.valid() {
            return stop(sent, changed("an entry that was not there"));
        }
        let index = valid;
        valid += 1;
        if !plan.owns(index) {
            continue;
        }
        let op = match operation {
            Ok(op) => op,
            Err(e) => return stop(sent, changed(&e.error)),
        };
        let Some(keyed) = plan.derivation(sent as usize, &op) else {
            return stop(sent, changed("a different operation"));
        };
        if tx.blocking_send((op, keyed)).is_err() {
            // The dispatcher stopped taking operations; it knows why.
            return FeedEnd::default();
        }
        sent += 1;
    }
    if sent < planned {
        return stop(
            sent,
            "the operations changed since they were checked: fewer than before".into(),
        );
    }
    FeedEnd::default()
}
