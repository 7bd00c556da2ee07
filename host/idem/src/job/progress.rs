//! Telling a source that its operations are still being worked on (a
//! JetStream `+WPI`, a Redis Streams claim kept fresh), so that a long
//! effect keeps its delivery: one keeper per run, not a timer per
//! operation (a timer armed and cancelled per message cost every
//! message: docs/benchmarks.md, "the consumer's timers").
//!
//! The keeper is one task with one interval: an operation is entered in its list when its slot starts and taken out when
//! its slot is done with it (a lock, no timer), and every period each
//! operation in the list is reported. An operation entered just after a
//! tick is first reported one period later, as its own interval would have
//! reported it; one entered just before a tick is reported early, which a
//! broker takes as the same news. Tested against a real JetStream, whose
//! ack wait an effect outlasts (`tests/suite/consume/nats.rs`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::task::{JoinHandle, JoinSet};

use super::feed::Ticket;

/// The operations of one run whose source wants to hear they are still
/// being worked on.
pub(crate) struct Progress<T> {
    live: Mutex<HashMap<u64, Arc<T>>>,
    next: AtomicU64,
}

/// An operation entered in a [`Progress`] list: taken out when dropped.
pub(crate) struct Entered<T> {
    progress: Arc<Progress<T>>,
    id: u64,
}

impl<T> Drop for Entered<T> {
    fn drop(&mut self) {
        self.progress.list().remove(&self.id);
    }
}

impl<T: Ticket> Progress<T> {
    /// A list whose operations are reported every `every`, by a task that
    /// runs until the returned handle is aborted (or the list is dropped).
    pub(crate) fn start(every: Duration) -> (Arc<Progress<T>>, JoinHandle<()>) {
        let progress = Arc::new(Progress {
            live: Mutex::new(HashMap::new()),
            next: AtomicU64::new(0),
        });
        let keeper = tokio::spawn(keep(Arc::downgrade(&progress), every));
        (progress, keeper)
    }

    /// Enters `ticket`'s operation in the list until the guard is dropped.
    pub(crate) fn enter(self: &Arc<Self>, ticket: Arc<T>) -> Entered<T> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.list().insert(id, ticket);
        Entered {
            progress: self.clone(),
            id,
        }
    }
}

impl<T> Progress<T> {
    fn list(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<T>>> {
        self.live
            .lock()
            .expect("the progress list is never poisoned")
    }
}

/// Every `every`, reports each operation then in the list, all at once (a
/// Redis report is a round trip: in a row, a slow one would hold back every
/// other delivery's).
async fn keep<T: Ticket>(progress: Weak<Progress<T>>, every: Duration) {
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(progress) = progress.upgrade() else {
            return;
        };
        let live: Vec<Arc<T>> = progress.list().values().cloned().collect();
        drop(progress);
        let mut reports = JoinSet::new();
        for ticket in live {
            reports.spawn(async move { ticket.in_progress().await });
        }
        while reports.join_next().await.is_some() {}
    }
}
