//! A broker as the run loop's feed: fetches as many messages as there are
//! free slots, rides out the broker's outages within the budget, and ends
//! the run when told to stop after so many deliveries or when idle.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use super::settle::{Delivered, Settling};
use super::{ConsumeOptions, FETCH_WAIT};
use crate::broker::MessageSource;
use crate::job::event::Observer;
use crate::job::feed::{Feed, Finale, Input, Pulled};
use crate::job::{JobEvent, Outage};

/// The feed of one consumer.
pub(super) struct Fetching<'a> {
    source: &'a mut dyn MessageSource,
    settling: Arc<Settling>,
    stop_after: Option<u64>,
    stop_when_idle: Option<Duration>,
    outage_budget: Duration,
    taken: u64,
    idle_since: Instant,
    broker_down: Option<Instant>,
    told_unacknowledged: bool,
    observer: Observer,
}

impl<'a> Fetching<'a> {
    /// Fetches from `source` as `options` say; `observer` hears warnings.
    pub(super) fn new(
        source: &'a mut dyn MessageSource,
        options: &ConsumeOptions,
        observer: Observer,
    ) -> Self {
        let settling = Arc::new(Settling {
            options: options.clone(),
            not_owned_delay: source.not_owned_delay(),
            told_not_owned: AtomicBool::new(false),
            observer: observer.clone(),
        });
        Fetching {
            source,
            settling,
            stop_after: options.stop_after,
            stop_when_idle: options.stop_when_idle,
            outage_budget: options.outage_budget,
            taken: 0,
            idle_since: Instant::now(),
            broker_down: None,
            told_unacknowledged: false,
            observer,
        }
    }

    fn warn(&self, text: &str) {
        (self.observer)(JobEvent::Warning(text));
    }

    /// Whether a consumer idle for long enough stops now: when the broker
    /// holds no delivery of its name unacknowledged, or can tell none (a
    /// broker that gives a closed channel's deliveries back at once); else,
    /// once `overdue` (idle past `--stop-when-idle`) outlasts the broker's
    /// redelivery wait, saying what it leaves. Meanwhile the deliveries
    /// given to a consumer that crashed come back and are run.
    async fn idle_stop(&mut self, overdue: Duration) -> Option<Finale> {
        let wait = self.source.redelivery_wait();
        let n = match self.source.unacknowledged().await {
            Ok(None | Some(0)) => return Some(Finale::default()),
            Ok(Some(n)) => n,
            Err(e) => {
                self.warn(&format!(
                    "{e}; cannot tell whether deliveries are left unacknowledged"
                ));
                return None;
            }
        };
        let source = self.source.describe();
        if overdue > wait + FETCH_WAIT {
            self.warn(&format!(
                "stopped when idle, leaving {n} messages of {source} unsettled (given to another \
                 consumer of its name, alive or crashed, and not back within {wait:?}, or not yet \
                 delivered): the broker delivers them again",
            ));
            return Some(Finale {
                unacknowledged: n,
                ..Finale::default()
            });
        }
        if !self.told_unacknowledged {
            self.told_unacknowledged = true;
            self.warn(&format!(
                "idle, but {n} messages of {source} are unsettled (given to another consumer of \
                 its name, or to one that crashed, or not yet delivered): waiting up to {wait:?} \
                 for them",
            ));
        }
        None
    }
}

impl Feed for Fetching<'_> {
    type Ticket = Delivered;
    const READS_AHEAD: bool = false;

    async fn pull(&mut self, max: usize, busy: bool) -> Pulled<Delivered> {
        let room = self
            .stop_after
            .map_or(usize::MAX, |n| n.saturating_sub(self.taken) as usize);
        if room == 0 {
            return Pulled::End(Finale::default());
        }
        let deliveries = match self.source.fetch(max.min(room), FETCH_WAIT).await {
            Ok(deliveries) => {
                self.broker_down = None;
                deliveries
            }
            Err(e) => {
                let since = *self.broker_down.get_or_insert_with(Instant::now);
                if since.elapsed() > self.outage_budget {
                    self.warn(&format!(
                        "{e}; the broker was unavailable past the outage budget: stopped"
                    ));
                    return Pulled::End(Finale {
                        outage: Some(Outage {
                            lasted_ms: since.elapsed().as_millis() as u64,
                            error: e.to_string(),
                        }),
                        ..Finale::default()
                    });
                }
                self.warn(&format!("{e}; trying again"));
                tokio::time::sleep(FETCH_WAIT).await;
                return Pulled::Taken(Vec::new());
            }
        };
        if deliveries.is_empty() {
            let idle = self.idle_since.elapsed();
            if let Some(after) = self.stop_when_idle
                && idle >= after
                && !busy
                && self.source.held() == 0
                && let Some(finale) = self.idle_stop(idle.saturating_sub(after)).await
            {
                return Pulled::End(finale);
            }
            return Pulled::Taken(Vec::new());
        }
        self.idle_since = Instant::now();
        self.taken += deliveries.len() as u64;
        Pulled::Taken(
            deliveries
                .into_iter()
                .map(|delivery| {
                    let json = Input::Json(delivery.body().to_vec());
                    (json, Delivered::new(delivery, self.settling.clone()))
                })
                .collect(),
        )
    }

    async fn close(&mut self) {
        self.source.give_back().await;
    }

    fn progress_every(&self) -> Option<Duration> {
        self.source.progress_every()
    }
}
