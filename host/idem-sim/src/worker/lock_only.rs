//! The lock-only guard: a job lock with a lease and the job's own
//! bookkeeping, as a careful job without idem does it.

use super::{Phase, Sim};
use crate::PausePoint;

/// The job lock: `SET lock <token> NX PX ttl`, read by the simulated clock.
#[derive(Default)]
pub(super) struct LeaseLock {
    pub(super) token: u64,
    pub(super) until_ms: u64,
    pub(super) next_token: u64,
}

impl LeaseLock {
    pub(super) fn held_by(&self, token: u64, now_ms: u64) -> bool {
        self.token == token && token != 0 && self.until_ms > now_ms
    }
}

impl Sim<'_> {
    pub(super) fn step_lock_only(&mut self, r: usize) {
        let n = self.scenario.job.customers;
        match self.runs[r].phase {
            Phase::Start => {
                if self.store_wait(r) {
                    return;
                }
                self.spend();
                let now = self.clock.now_ms();
                if self.lock.token != 0 && self.lock.until_ms > now {
                    self.counters.lock_busy += 1;
                    self.runs[r].phase = Phase::Done;
                    self.note(r, || "finds the job lock held: exits".into());
                } else {
                    self.lock.next_token += 1;
                    self.lock.token = self.lock.next_token;
                    self.lock.until_ms = now + self.scenario.lock_ttl_ms;
                    self.runs[r].token = self.lock.token;
                    self.runs[r].phase = Phase::Next(0);
                    let token = self.lock.token;
                    self.note(r, || format!("takes the job lock (token {token})"));
                }
            }
            Phase::Next(i) if i >= n => self.runs[r].phase = Phase::Release,
            Phase::Next(i) => {
                // One round trip: check and renew the lock, read the
                // bookkeeping.
                if self.store_wait(r) {
                    return;
                }
                self.spend();
                let now = self.clock.now_ms();
                if !self.lock.held_by(self.runs[r].token, now) {
                    self.counters.lock_lost += 1;
                    self.runs[r].phase = Phase::Done;
                    self.note(r, || "notices it lost the job lock: stops".into());
                    return;
                }
                self.lock.until_ms = now + self.scenario.lock_ttl_ms;
                if self.bookkeeping.contains(&i) {
                    self.counters.skipped_charged += 1;
                    self.runs[r].phase = Phase::Next(i + 1);
                    return;
                }
                self.runs[r].phase = Phase::Charge(i);
                self.pause_if(r, i, PausePoint::BeforeCharge);
            }
            Phase::Charge(i) => {
                self.spend();
                let at = self.rel_ms();
                let reply = self.ledger.charge(at, &self.spec(r).name, i, None, None);
                self.note(r, || format!("charges invoice {i}: {reply:?}"));
                if self.spec(r).crashes_after_charge(i) {
                    self.crash(r);
                    return;
                }
                self.runs[r].phase = Phase::Record(i);
                self.pause_if(r, i, PausePoint::BeforeComplete);
            }
            Phase::Record(i) => {
                if self.store_wait(r) {
                    return;
                }
                self.spend();
                if self.spec(r).loses_completion(i) {
                    self.counters.lost_completions += 1;
                    self.note(r, || format!("bookkeeping write for invoice {i} is lost"));
                } else {
                    self.bookkeeping.insert(i);
                    self.recorded[i] = true;
                }
                self.runs[r].phase = Phase::Next(i + 1);
            }
            Phase::Release => {
                if self.store_wait(r) {
                    return;
                }
                self.spend();
                if self.lock.held_by(self.runs[r].token, self.clock.now_ms()) {
                    self.lock.token = 0;
                }
                self.runs[r].phase = Phase::Done;
                self.note(r, || "done".into());
            }
            Phase::Done => {}
        }
    }
}
