//! A deterministic, seeded simulation of the nightly billing job: the claim
//! the project rests on, shown rather than asserted.
//!
//! > A lock reduces duplicate charges but never eliminates them;
//! > idempotency at the effect eliminates them.
//!
//! The job charges one invoice per customer for a billing period. Several
//! *runs* of it (the scheduled run, a scheduler retry, a second instance, a
//! manual re-run) are workers: explicit state machines that a scheduler
//! steps one at a time. Each step awaits one call (the lock service, the
//! store through the engine, or the payment [`Ledger`]) to its end before
//! the next step starts, so there are no OS threads racing and no real
//! sleeping.
//!
//! **Time is simulated.** A [`ManualClock`] is the store's clock; every step
//! advances it by [`Scenario::step_ms`] (plus the slow-store latency for a
//! store call), and when every run is paused the scheduler jumps it to the
//! earliest wake-up. Leases (the lock's and the store's) expire by that
//! clock. **Choices are seeded**: when several runs are ready, a
//! [`SplitMix64`] seeded by [`Scenario::seed`] picks which steps next, so a
//! seed fully determines a schedule.
//!
//! **Two guards, same job, same faults** ([`Guard`]):
//!
//! - *lock only*: a job lock with a lease, like Redis `SET lock NX PX ttl`
//!   read against the simulated clock, plus the job's own "already
//!   charged?" bookkeeping written after each charge, as a typical job
//!   does. It is the careful version: before every charge the run checks
//!   that it still holds the lock and renews it (a watchdog), and stops when
//!   it lost it. Charges carry neither key nor fence.
//! - *idem*: every charge goes through [`Engine::begin`](idem::engine::Engine::begin) with a real policy
//!   over a real store; the charge carries the key and the fence to the
//!   ledger; then `complete` (or `fail` when the ledger refused a stale
//!   fence). No lock at all.
//! - *in store*: idem with the charge a row written in the store's own
//!   transaction and committed with the completion: a crash or a lost
//!   commit loses the charge with its end, an expired claim is known to
//!   have charged nothing and is re-executed, and a deposed holder's
//!   commit is fenced inside its transaction.
//!
//! **Faults** ([`Fault`]) are injected at chosen invoices of chosen runs: a
//! pause longer than the lease (GC, hypervisor stall, slow disk) before the
//! charge or between the charge and its completion; a crash after the charge
//! and before completion; a completion write that is lost; a slow store.
//!
//! The result is a [`Report`]: [`Counters`] (charges, duplicate charges,
//! fenced writes, replays, refusals by the ledger, outcome-unknown
//! records…), the per-invoice picture, the ledger's entries, key drift, and
//! (with [`Scenario::trace`]) a line per step. [`Report::check_idem`] states
//! the invariants idem guarantees, and for which configurations.
//!
//! It is a crate of its own, apart from the `idem` library, so that the
//! library a payment service links holds no simulation: its users are the
//! chaos suite (`tests/suite/chaos.rs`) and `idem demo` (`idem-cli`).

#![warn(missing_docs)]

mod check;
mod ledger;
mod random;
mod rng;
mod worker;

use idem::engine::EngineError;
use idem::policy::LoadedPolicy;
use idem_core::{Operation, OperationLimits, RecordState, Trigger};
use idem_store::{ManualClock, Store};
use serde::Serialize;
use thiserror::Error;

pub use check::Guarantee;
pub use ledger::{KeyDrift, Ledger, LedgerEntry, LedgerMode, LedgerReply};
pub use rng::SplitMix64;

/// The job: one invoice per customer for one billing period.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    /// The tenant the charges belong to. Randomised runs sharing one store
    /// use a tenant per seed: the tenant is part of the billing key, so each
    /// seed gets keys of its own.
    pub tenant: String,
    /// The billing period, `YYYY-MM`.
    pub billing_period: String,
    /// How many customers (one invoice each).
    pub customers: usize,
    /// Puts customer and invoice into the operation's tenant too. Only for
    /// policies that key on the tenant alone (the test fixture
    /// `fixture-misbehaving`, which re-executes every expired claim): it
    /// gives them one key per invoice. `billing-charge` keys are unique per
    /// invoice either way.
    pub invoice_in_tenant: bool,
}

impl Job {
    /// `customers` customers of tenant `acme`, period 2026-11.
    pub fn new(customers: usize) -> Self {
        Job {
            tenant: "acme".into(),
            billing_period: "2026-11".into(),
            customers,
            invoice_in_tenant: false,
        }
    }

    /// The customer of invoice `i`: `c01`, `c02`…
    pub fn customer(&self, i: usize) -> String {
        format!("c{:02}", i + 1)
    }

    /// The id of invoice `i`.
    pub fn invoice_id(&self, i: usize) -> String {
        format!("inv-{}-{}", self.billing_period, self.customer(i))
    }

    /// The charge operation for invoice `i` as run `run` sends it (the
    /// billing-charge operation format).
    pub fn operation(&self, i: usize, run: &RunSpec) -> Operation {
        let customer = self.customer(i);
        let invoice = self.invoice_id(i);
        let tenant = if self.invoice_in_tenant {
            format!("{}/{customer}/{invoice}", self.tenant)
        } else {
            self.tenant.clone()
        };
        let doc = serde_json::json!({
            "kind": "charge",
            "tenant": tenant,
            "fields": {
                "customer": customer,
                "billing_period": self.billing_period,
                "invoice_id": invoice,
                "amount": (100 + 5 * i).to_string(),
                "currency": "EUR",
            },
            "run": {"run_id": run.name, "trigger": run.trigger.as_str(), "attempt": 1},
        });
        // The document is built here from known-good parts: a failure is a
        // bug in this module, not an input error.
        Operation::from_json(&doc.to_string(), &OperationLimits::default())
            .expect("the simulation builds valid operations")
    }
}

/// Where in an invoice's handling a pause strikes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum PausePoint {
    /// After the lock check (lock only) or the claim (idem), before the
    /// charge: the classic paused lock holder.
    BeforeCharge,
    /// After the charge, before its bookkeeping or completion is written
    /// (a slow disk on the write).
    BeforeComplete,
}

/// A fault injected into one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Fault {
    /// The run stops for `ms` at `at` of invoice `invoice`.
    Pause {
        /// Which invoice.
        invoice: usize,
        /// Where.
        at: PausePoint,
        /// For how long, simulated ms.
        ms: u64,
    },
    /// The run dies after charging `invoice`, before anything is written
    /// about it (its claim or lock is left to expire).
    CrashAfterCharge {
        /// Which invoice.
        invoice: usize,
    },
    /// The write recording `invoice` (completion, or the job's bookkeeping)
    /// never reaches the store; the run believes it did and carries on.
    LoseCompletion {
        /// Which invoice.
        invoice: usize,
    },
    /// Every store call of the run (lock service, bookkeeping, idem store)
    /// takes `extra_ms` more.
    SlowStore {
        /// Extra simulated latency per call.
        extra_ms: u64,
    },
}

/// One run of the job.
#[derive(Debug, Clone)]
pub struct RunSpec {
    /// The run id (also the holder's run in the store).
    pub name: String,
    /// Why it runs.
    pub trigger: Trigger,
    /// When it starts, simulated ms after the simulation starts.
    pub start_ms: u64,
    /// What goes wrong in it.
    pub faults: Vec<Fault>,
    /// Another policy for this run only (a policy changed mid-period: key
    /// drift). Ignored under the lock-only guard.
    pub policy: Option<LoadedPolicy>,
    /// The version this run's policy replaces, looked up as a dual read
    /// (see `idem::engine::dual_read`): a duplicate across the upgrade is
    /// caught under the old key.
    pub dual_read: Option<LoadedPolicy>,
}

impl RunSpec {
    /// A run without faults.
    pub fn new(name: impl Into<String>, trigger: Trigger, start_ms: u64) -> Self {
        RunSpec {
            name: name.into(),
            trigger,
            start_ms,
            faults: Vec::new(),
            policy: None,
            dual_read: None,
        }
    }

    /// The run with one more fault.
    pub fn with(mut self, fault: Fault) -> Self {
        self.faults.push(fault);
        self
    }

    /// The run under another policy.
    pub fn with_policy(mut self, policy: LoadedPolicy) -> Self {
        self.policy = Some(policy);
        self
    }

    /// The run with its policy also looking up the keys `previous` derives
    /// (a dual-read window open for the whole run).
    pub fn with_dual_read(mut self, previous: LoadedPolicy) -> Self {
        self.dual_read = Some(previous);
        self
    }

    fn pause(&self, invoice: usize, point: PausePoint) -> Option<u64> {
        self.faults.iter().find_map(|f| match *f {
            Fault::Pause { invoice: i, at, ms } if i == invoice && at == point => Some(ms),
            _ => None,
        })
    }

    fn crashes_after_charge(&self, invoice: usize) -> bool {
        self.faults.contains(&Fault::CrashAfterCharge { invoice })
    }

    fn loses_completion(&self, invoice: usize) -> bool {
        self.faults.contains(&Fault::LoseCompletion { invoice })
    }

    fn store_latency_ms(&self) -> u64 {
        self.faults
            .iter()
            .map(|f| match f {
                Fault::SlowStore { extra_ms } => *extra_ms,
                _ => 0,
            })
            .sum()
    }
}

/// A job, its runs and their faults, the ledger's mode, and the seed.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// Picks which ready run steps next.
    pub seed: u64,
    /// The job.
    pub job: Job,
    /// Its runs.
    pub runs: Vec<RunSpec>,
    /// What the payment provider enforces.
    pub ledger: LedgerMode,
    /// What one call costs, simulated ms.
    pub step_ms: u64,
    /// The job lock's lease (lock only), ms: the policy's lease (5 min for
    /// billing-charge) by default, so both guards get the same lease.
    pub lock_ttl_ms: u64,
    /// Record a line per step in [`Report::trace`].
    pub trace: bool,
}

impl Scenario {
    /// A scenario without runs: add them to [`Scenario::runs`].
    pub fn new(seed: u64, job: Job) -> Self {
        Scenario {
            seed,
            job,
            runs: Vec::new(),
            ledger: LedgerMode::NAIVE,
            step_ms: STEP_MS,
            lock_ttl_ms: LEASE_MS,
            trace: false,
        }
    }

    /// The demo's story: the nightly run pauses (before charging a seeded
    /// invoice among the first ten) for longer than its lease; the scheduler
    /// retries it once the lease has expired; the retry finishes while the
    /// first run is still paused; then the first run wakes up.
    pub fn overlapping_pause(seed: u64, customers: usize) -> Self {
        let mut rng = SplitMix64::new(seed ^ 0x005E_ED0F_DE70);
        let customers = customers.max(1);
        let invoice = if customers == 1 {
            0
        } else {
            1 + rng.below(customers.min(10) as u64 - 1) as usize
        };
        // The nightly run reaches the invoice within ~10 steps of 3 calls,
        // far less than 30 s, so its lease (renewed at the invoice) has
        // expired by the time the retry starts; the pause outlasts the
        // retry, which needs about 3 calls per customer.
        let retry_at = LEASE_MS + rng.range(30_000, 60_000);
        let pause = LEASE_MS + 60_000 + customers as u64 * 4 * STEP_MS + rng.range(0, 60_000);
        let mut s = Scenario::new(seed, Job::new(customers));
        s.runs = vec![
            RunSpec::new("nightly", Trigger::Scheduled, 0).with(Fault::Pause {
                invoice,
                at: PausePoint::BeforeCharge,
                ms: pause,
            }),
            RunSpec::new("nightly-retry", Trigger::Retry, retry_at),
        ];
        s
    }

    /// A randomised schedule for `seed`: 1 to 3 customers, 2 or 3
    /// overlapping runs with random triggers, starts and faults (pauses
    /// before or after the charge, crashes, lost completions, slow stores),
    /// a random ledger mode, and a final clean reconciling run once every
    /// lease has expired. See the `random` module for the distribution.
    pub fn random(seed: u64) -> Self {
        random::scenario(seed)
    }
}

/// The lease both guards use, ms: billing-charge's five minutes.
pub const LEASE_MS: u64 = 300_000;

/// What one call costs by default, simulated ms.
pub const STEP_MS: u64 = 200;

/// What guards the charges.
#[derive(Clone)]
// Built once per simulation and passed by reference: the size difference
// between the variants costs nothing worth a box.
#[allow(clippy::large_enum_variant)]
pub enum Guard {
    /// A lease lock and the job's own bookkeeping.
    LockOnly,
    /// idem: `policy` over `store` (whose clock must be the simulation's
    /// [`ManualClock`]).
    Idem {
        /// The policy deriving the keys (the runs' default).
        policy: LoadedPolicy,
        /// The store holding the claims.
        store: Store,
    },
    /// idem with each charge a row written in the store's own transaction,
    /// committed with its completion (`Engine::begin_in_store`, then
    /// `Execution::run_in_sqlite` / `run_in_postgres`): `store` must be
    /// SQLite or PostgreSQL.
    InStore {
        /// The policy deriving the keys (the runs' default).
        policy: LoadedPolicy,
        /// The store holding the claims and the charges.
        store: Store,
    },
}

impl Guard {
    /// `lock-only` or `idem`.
    pub fn name(&self) -> &'static str {
        match self {
            Guard::LockOnly => "lock-only",
            Guard::Idem { .. } => "idem",
            Guard::InStore { .. } => "in-store",
        }
    }
}

/// What a simulation counted.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Counters {
    /// Charges that moved money.
    pub charges: u64,
    /// Charges beyond the first of the same (customer, period, invoice).
    pub duplicate_charges: u64,
    /// Writes refused because the writer was deposed
    /// ([`EngineError::Fenced`]).
    pub fenced_writes: u64,
    /// Duplicates handed the stored outcome.
    pub replays: u64,
    /// Requests the ledger refused: a repeated key (answered with the
    /// original charge) or a stale fence.
    pub refused_by_ledger: u64,
    /// Records left outcome-unknown (for review) at the end.
    pub outcome_unknown: u64,
    /// Records left in progress at the end (a crashed or lost holder whose
    /// claim nobody looked at since).
    pub in_progress_left: u64,
    /// Duplicates told "in progress elsewhere".
    pub in_progress: u64,
    /// Expired claims the policy sent to review (`mark-unknown`).
    pub marked_unknown: u64,
    /// Other rejections by the policy.
    pub rejected: u64,
    /// Keys reused with another fingerprint.
    pub conflicts: u64,
    /// Unsafe decisions the host refused (the duplicate was rejected).
    pub unsafe_refused: u64,
    /// Completions the store accepted.
    pub completed: u64,
    /// Runs that found the job lock held and exited (lock only).
    pub lock_busy: u64,
    /// Runs that noticed they had lost the lock and stopped (lock only).
    pub lock_lost: u64,
    /// Invoices skipped because the bookkeeping said charged (lock only).
    pub skipped_charged: u64,
    /// Pauses that struck.
    pub pauses: u64,
    /// Runs that crashed.
    pub crashes: u64,
    /// Completion (or bookkeeping) writes lost.
    pub lost_completions: u64,
    /// Invoices charged under two different keys (see [`KeyDrift`]).
    pub key_drift: u64,
}

/// One invoice at the end.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InvoiceReport {
    /// The customer.
    pub customer: String,
    /// The invoice id.
    pub invoice_id: String,
    /// Charges that moved money for it.
    pub charges: u32,
    /// The idem record's state (idem only; `None` when absent).
    #[serde(serialize_with = "state_name")]
    pub record: Option<RecordState>,
    /// The stored outcome's body (the receipt), when completed.
    pub receipt: Option<String>,
    /// Whether some run's completion (or bookkeeping write) succeeded.
    pub recorded_by_a_run: bool,
}

fn state_name<S: serde::Serializer>(s: &Option<RecordState>, ser: S) -> Result<S::Ok, S::Error> {
    match s {
        Some(s) => ser.serialize_some(s.as_str()),
        None => ser.serialize_none(),
    }
}

/// What a simulation did.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// `lock-only` or `idem`.
    pub guard: &'static str,
    /// The scenario's seed.
    pub seed: u64,
    /// The ledger's mode.
    pub ledger_mode: LedgerMode,
    /// The counters.
    pub counters: Counters,
    /// Per invoice.
    pub invoices: Vec<InvoiceReport>,
    /// Every charge request the ledger saw.
    pub ledger: Vec<LedgerEntry>,
    /// Every invoice charged under two different keys.
    pub drift: Vec<KeyDrift>,
    /// A line per step, when [`Scenario::trace`] is set.
    pub trace: Vec<String>,
    /// How long the job took, simulated ms.
    pub simulated_ms: u64,
}

/// Why a simulation could not run to its end (never a fault it injected:
/// those are counted).
#[derive(Debug, Error)]
pub enum SimError {
    /// The engine failed in a way no fault explains (a store error, a
    /// policy refusing the job's operations).
    #[error("run {run}, invoice {invoice}: {source}")]
    Engine {
        /// The run.
        run: String,
        /// The invoice.
        invoice: usize,
        /// The error.
        source: EngineError,
    },
    /// A charge in the store's transaction ended without committing for a
    /// reason no fault explains (its SQL failed).
    #[error("run {run}, invoice {invoice}: the charge's transaction did not commit: {detail}")]
    Charge {
        /// The run.
        run: String,
        /// The invoice.
        invoice: usize,
        /// What the engine answered.
        detail: String,
    },
    /// The engine answered a `begin` in a way this simulator does not
    /// know (`Begin` is non-exhaustive: a later engine's answer).
    #[error("run {run}, invoice {invoice}: an answer the simulator does not know: {answer}")]
    UnknownAnswer {
        /// The run.
        run: String,
        /// The invoice.
        invoice: usize,
        /// The answer, as `Debug` shows it.
        answer: String,
    },
    /// The store failed while reading the final state.
    #[error("reading the final state: {0}")]
    Store(#[from] idem_store::StoreError),
    /// The schedule did not finish within its step budget.
    #[error("the schedule did not finish within {0} steps")]
    Stuck(u64),
}

/// Runs `scenario` under `guard`, with `clock` as the simulated time (the
/// idem store's clock). Deterministic for a given scenario and store
/// contents: the seed decides every choice.
pub async fn simulate(
    scenario: &Scenario,
    guard: &Guard,
    clock: &ManualClock,
) -> Result<Report, SimError> {
    worker::Sim::new(scenario, guard, clock).run().await
}

/// The invoices of `job` whose record key under `new` differs from their key
/// under `old`: what a policy change mid-period would charge a second time
/// (the engine cannot see a charge made under another key). A pre-flight
/// check before a re-run under a changed policy.
pub fn key_drift(
    job: &Job,
    old: &LoadedPolicy,
    new: &LoadedPolicy,
) -> Result<Vec<usize>, EngineError> {
    let probe = RunSpec::new("drift-check", Trigger::Manual, 0);
    let key =
        |policy: &LoadedPolicy, i: usize| -> Result<(String, idem_core::Digest), EngineError> {
            let keyed = policy
                .derive(&job.operation(i, &probe), 0)?
                .value
                .map_err(EngineError::Refused)?;
            Ok((keyed.namespace, keyed.key))
        };
    let mut drifting = Vec::new();
    for i in 0..job.customers {
        if key(old, i)? != key(new, i)? {
            drifting.push(i);
        }
    }
    Ok(drifting)
}
