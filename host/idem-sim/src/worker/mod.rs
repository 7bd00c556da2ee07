//! The scheduler and the workers: one explicit state machine per run.

use std::collections::HashSet;

use idem::engine::{Begin, Engine, EngineError, EngineOptions, Execution};
use idem_core::RecordState;
use idem_store::{ManualClock, Outcome, RecordKey};

use crate::ledger::{Ledger, LedgerReply};
use crate::rng::SplitMix64;
use crate::{Counters, Guard, InvoiceReport, PausePoint, Report, RunSpec, Scenario, SimError};

mod in_store;
mod lock_only;

use lock_only::LeaseLock;

/// Where a run is. Lock only: `Start` takes the job lock, `Next(i)` checks
/// (and renews) the lock and reads the bookkeeping, `Charge(i)` charges,
/// `Record(i)` writes the bookkeeping, `Release` frees the lock. idem:
/// `Next(i)` begins (claims) invoice `i`, `Charge(i)` charges with the key
/// and fence, `Record(i)` completes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Start,
    Next(usize),
    Charge(usize),
    Record(usize),
    Release,
    Done,
}

struct RunState {
    ready_at_ms: u64,
    phase: Phase,
    /// The lock token this run holds (lock only).
    token: u64,
    /// The claim this run holds (idem).
    claim: Option<Execution>,
    /// What the ledger answered the charge being recorded.
    reply: Option<LedgerReply>,
    /// Whether the slow-store latency before the next store call was
    /// already waited.
    waited: bool,
    /// The engine of this run (idem: the run's policy over the store).
    engine: Option<Engine>,
}

pub(super) struct Sim<'a> {
    scenario: &'a Scenario,
    guard: &'a Guard,
    clock: &'a ManualClock,
    t0: u64,
    rng: SplitMix64,
    ledger: Ledger,
    runs: Vec<RunState>,
    counters: Counters,
    trace: Vec<String>,
    lock: LeaseLock,
    /// The lock-only job's "already charged?" table.
    bookkeeping: HashSet<usize>,
    recorded: Vec<bool>,
    /// Each invoice's key under the job's default policy, as a `begin`
    /// reported it (saves deriving it again at the end).
    keys: Vec<Option<RecordKey>>,
}

impl<'a> Sim<'a> {
    pub(super) fn new(scenario: &'a Scenario, guard: &'a Guard, clock: &'a ManualClock) -> Self {
        let t0 = clock.now_ms();
        let runs = scenario
            .runs
            .iter()
            .map(|spec| RunState {
                ready_at_ms: t0 + spec.start_ms,
                phase: match guard {
                    Guard::LockOnly => Phase::Start,
                    Guard::Idem { .. } | Guard::InStore { .. } => Phase::Next(0),
                },
                token: 0,
                claim: None,
                reply: None,
                waited: false,
                engine: match guard {
                    Guard::LockOnly => None,
                    Guard::Idem { policy, store } | Guard::InStore { policy, store } => {
                        let engine = Engine::new(
                            spec.policy.clone().unwrap_or_else(|| policy.clone()),
                            store.clone(),
                            EngineOptions::default(),
                        );
                        Some(match &spec.dual_read {
                            Some(previous) => engine.with_dual_read(previous.clone(), u64::MAX),
                            None => engine,
                        })
                    }
                },
            })
            .collect();
        Sim {
            scenario,
            guard,
            clock,
            t0,
            rng: SplitMix64::new(scenario.seed),
            ledger: Ledger::new(scenario.ledger),
            runs,
            counters: Counters::default(),
            trace: Vec::new(),
            lock: LeaseLock::default(),
            bookkeeping: HashSet::new(),
            recorded: vec![false; scenario.job.customers],
            keys: vec![None; scenario.job.customers],
        }
    }

    /// Steps ready runs, chosen by the seeded generator, until all are done.
    pub(super) async fn run(mut self) -> Result<Report, SimError> {
        let budget = 64 * (self.runs.len() as u64 + 1) * (self.scenario.job.customers as u64 + 2);
        let mut steps = 0u64;
        loop {
            let now = self.clock.now_ms();
            let ready: Vec<usize> = (0..self.runs.len())
                .filter(|&r| self.runs[r].phase != Phase::Done && self.runs[r].ready_at_ms <= now)
                .collect();
            if ready.is_empty() {
                // Everyone is paused or not yet started: jump to the
                // earliest wake-up (nothing happens in between).
                match self
                    .runs
                    .iter()
                    .filter(|r| r.phase != Phase::Done)
                    .map(|r| r.ready_at_ms)
                    .min()
                {
                    None => break,
                    Some(t) => {
                        self.clock.advance_ms(t - now);
                        continue;
                    }
                }
            }
            steps += 1;
            if steps > budget {
                return Err(SimError::Stuck(budget));
            }
            let r = ready[self.rng.below(ready.len() as u64) as usize];
            match self.guard {
                Guard::LockOnly => self.step_lock_only(r),
                Guard::Idem { .. } => self.step_idem(r).await?,
                Guard::InStore { .. } => self.step_in_store(r).await?,
            }
        }
        self.finish().await
    }

    fn spec(&self, r: usize) -> &'a RunSpec {
        &self.scenario.runs[r]
    }

    fn rel_ms(&self) -> u64 {
        self.clock.now_ms() - self.t0
    }

    /// One call's cost on the shared timeline.
    fn spend(&self) {
        self.clock.advance_ms(self.scenario.step_ms);
    }

    /// A slow store: before its store call, the run first waits for the
    /// latency (other runs go on meanwhile), then makes the call, so the
    /// call lands late, which is what matters to leases. Returns whether the
    /// run must wait now.
    fn store_wait(&mut self, r: usize) -> bool {
        let latency = self.spec(r).store_latency_ms();
        let run = &mut self.runs[r];
        if latency == 0 || std::mem::take(&mut run.waited) {
            return false;
        }
        run.waited = true;
        run.ready_at_ms = self.clock.now_ms() + latency;
        true
    }

    fn note(&mut self, r: usize, message: impl FnOnce() -> String) {
        if self.scenario.trace {
            let t = self.rel_ms();
            let line = format!(
                "{:>6}.{}s  {:<14} {}",
                t / 1000,
                (t % 1000) / 100,
                self.spec(r).name,
                message()
            );
            self.trace.push(line);
        }
    }

    fn pause_if(&mut self, r: usize, invoice: usize, point: PausePoint) {
        if let Some(ms) = self.spec(r).pause(invoice, point) {
            self.counters.pauses += 1;
            // After any pause already begun at this step (an effect in the
            // store's transaction takes both of its pauses before it).
            let from = self.runs[r].ready_at_ms.max(self.clock.now_ms());
            self.runs[r].ready_at_ms = from + ms;
            self.note(r, || format!("pauses for {} s ({point:?})", ms / 1000));
        }
    }

    fn crash(&mut self, r: usize) {
        self.counters.crashes += 1;
        // Dropping the claim writes nothing: the record stays in progress
        // until its lease expires, exactly as when a process dies.
        self.runs[r].claim = None;
        self.runs[r].phase = Phase::Done;
        self.note(r, || "crashes".into());
    }

    async fn step_idem(&mut self, r: usize) -> Result<(), SimError> {
        let n = self.scenario.job.customers;
        match self.runs[r].phase {
            Phase::Next(i) if i >= n => {
                self.runs[r].phase = Phase::Done;
                self.note(r, || "done".into());
            }
            Phase::Next(i) => self.claim_next(r, i, false).await?,
            Phase::Charge(i) => {
                self.spend();
                let at = self.rel_ms();
                let claim = self.runs[r].claim.as_ref().expect("charging under a claim");
                let (key, fence) = (claim.key_hex(), claim.fence());
                let reply = self
                    .ledger
                    .charge(at, &self.spec(r).name, i, Some(&key), Some(fence));
                if !reply.moved_money() {
                    self.counters.refused_by_ledger += 1;
                }
                self.note(r, || {
                    format!("charges invoice {i} (fence {fence}): {reply:?}")
                });
                if self.spec(r).crashes_after_charge(i) {
                    self.crash(r);
                    return Ok(());
                }
                self.runs[r].reply = Some(reply);
                self.runs[r].phase = Phase::Record(i);
                self.pause_if(r, i, PausePoint::BeforeComplete);
            }
            Phase::Record(i) => {
                if self.store_wait(r) {
                    return Ok(());
                }
                self.spend();
                self.runs[r].phase = Phase::Next(i + 1);
                let claim = self.runs[r].claim.take().expect("recording under a claim");
                let reply = self.runs[r].reply.take().expect("a charge was made");
                if self.spec(r).loses_completion(i) {
                    self.counters.lost_completions += 1;
                    self.note(r, || format!("completion of invoice {i} is lost"));
                    return Ok(());
                }
                let written = match &reply {
                    LedgerReply::Charged { receipt } | LedgerReply::AlreadyCharged { receipt } => {
                        claim
                            .complete(Outcome::new(0, receipt.clone().into_bytes()))
                            .await
                            .map(|()| true)
                    }
                    // Only a deposed holder's fence is stale: this write
                    // will be fenced, and says so in the store's terms.
                    LedgerReply::StaleFence { .. } => claim
                        .fail(
                            true,
                            Outcome::error(409, "the ledger refused a stale fence"),
                        )
                        .await
                        .map(|()| false),
                };
                match written {
                    Ok(completed) => {
                        if completed {
                            self.counters.completed += 1;
                            self.recorded[i] = true;
                        }
                    }
                    Err(EngineError::Fenced(_)) => {
                        self.counters.fenced_writes += 1;
                        self.note(r, || format!("write for invoice {i} is fenced"));
                    }
                    Err(source) => {
                        return Err(SimError::Engine {
                            run: self.spec(r).name.clone(),
                            invoice: i,
                            source,
                        });
                    }
                }
            }
            Phase::Start | Phase::Release | Phase::Done => self.runs[r].phase = Phase::Done,
        }
        Ok(())
    }

    /// Begins (claims) invoice `i` for run `r`: `in_store`, as a holder
    /// whose charge commits with its end ([`Engine::begin_in_store`]).
    async fn claim_next(&mut self, r: usize, i: usize, in_store: bool) -> Result<(), SimError> {
        if self.store_wait(r) {
            return Ok(());
        }
        self.spend();
        self.runs[r].phase = Phase::Next(i + 1);
        let op = self.scenario.job.operation(i, self.spec(r));
        let engine = self.runs[r]
            .engine
            .as_ref()
            .expect("idem runs have an engine");
        let begun = if in_store {
            engine.begin_in_store(&op).await
        } else {
            engine.begin(&op).await
        };
        if self.spec(r).policy.is_none()
            && let Ok(b) = &begun
        {
            self.keys[i] = Some(b.key().clone());
        }
        match begun {
            Ok(Begin::Execute(claim)) => {
                let (fence, over) = (claim.fence(), claim.is_take_over());
                self.runs[r].claim = Some(claim);
                self.runs[r].phase = Phase::Charge(i);
                self.note(r, || {
                    format!("claims invoice {i} (fence {fence}, take-over {over})")
                });
                self.pause_if(r, i, PausePoint::BeforeCharge);
                if in_store {
                    // The charge and the end are one commit: a pause
                    // "between" them is a pause before that commit.
                    self.pause_if(r, i, PausePoint::BeforeComplete);
                }
            }
            Ok(Begin::Replay(_)) => self.counters.replays += 1,
            Ok(Begin::InProgress { .. }) => {
                self.counters.in_progress += 1;
                self.note(r, || format!("invoice {i}: in progress elsewhere"));
            }
            Ok(Begin::Conflict { .. }) => self.counters.conflicts += 1,
            Ok(Begin::Rejected { marked_unknown, .. }) => {
                if marked_unknown {
                    self.counters.marked_unknown += 1;
                    self.note(r, || format!("invoice {i}: expired claim sent to review"));
                } else {
                    self.counters.rejected += 1;
                }
            }
            // The host's safety gate refused the policy's decision
            // (the fixture's re-execute of a final record): the
            // duplicate is rejected, fail closed.
            Ok(other) => {
                return Err(SimError::UnknownAnswer {
                    run: self.spec(r).name.clone(),
                    invoice: i,
                    answer: format!("{other:?}"),
                });
            }
            Err(EngineError::Policy(_)) => self.counters.unsafe_refused += 1,
            Err(source) => {
                return Err(SimError::Engine {
                    run: self.spec(r).name.clone(),
                    invoice: i,
                    source,
                });
            }
        }
        Ok(())
    }

    /// Reads the final state and tallies the report.
    async fn finish(mut self) -> Result<Report, SimError> {
        // Every answer the runs got, into the attempt log before anyone
        // reads it.
        for run in &self.runs {
            if let Some(engine) = &run.engine {
                engine.flush_log().await;
            }
        }
        let job = &self.scenario.job;
        let charges = self.ledger.charges_per_invoice(job.customers);
        let mut invoices = Vec::with_capacity(job.customers);
        for (i, &count) in charges.iter().enumerate() {
            let mut report = InvoiceReport {
                customer: job.customer(i),
                invoice_id: job.invoice_id(i),
                charges: count,
                record: None,
                receipt: None,
                recorded_by_a_run: self.recorded[i],
            };
            if let Guard::Idem { policy, store } | Guard::InStore { policy, store } = self.guard {
                // The record under the job's (default) policy's key.
                let key = match self.keys[i].take() {
                    Some(key) => key,
                    None => {
                        let engine =
                            Engine::new(policy.clone(), store.clone(), EngineOptions::default());
                        let probe = crate::RunSpec::new("final", idem_core::Trigger::Manual, 0);
                        let keyed = engine.derive(&job.operation(i, &probe)).map_err(|source| {
                            SimError::Engine {
                                run: "final".into(),
                                invoice: i,
                                source,
                            }
                        })?;
                        RecordKey::new(keyed.namespace, keyed.key)
                    }
                };
                if let Some(view) = store.records().get(&key).await? {
                    let record = view.record;
                    match record.state {
                        RecordState::OutcomeUnknown => self.counters.outcome_unknown += 1,
                        RecordState::InProgress => self.counters.in_progress_left += 1,
                        _ => {}
                    }
                    report.receipt = record
                        .outcome
                        .filter(|_| record.state == RecordState::Completed)
                        .map(|o| String::from_utf8_lossy(&o.body).into_owned());
                    report.record = Some(record.state);
                }
            }
            invoices.push(report);
        }
        self.counters.charges = charges.iter().map(|&c| u64::from(c)).sum();
        self.counters.duplicate_charges = charges
            .iter()
            .map(|&c| u64::from(c.saturating_sub(1)))
            .sum();
        self.counters.key_drift = self.ledger.drift().len() as u64;
        Ok(Report {
            guard: self.guard.name(),
            seed: self.scenario.seed,
            ledger_mode: self.scenario.ledger,
            counters: self.counters,
            invoices,
            ledger: self.ledger.entries().to_vec(),
            drift: self.ledger.drift().to_vec(),
            trace: self.trace,
            simulated_ms: self.clock.now_ms() - self.t0,
        })
    }
}

/// Advancing a [`ManualClock`] by milliseconds.
trait AdvanceMs {
    fn advance_ms(&self, ms: u64);
}

impl AdvanceMs for ManualClock {
    fn advance_ms(&self, ms: u64) {
        self.advance(std::time::Duration::from_millis(ms));
    }
}
