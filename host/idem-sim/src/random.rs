//! Randomised schedules: every fault, mixed, from a seed.
//!
//! Sizes are small on purpose (1 to 3 customers, 2 or 3 runs): the hazards
//! are about interleavings around one invoice, not volume, and small
//! schedules let CI run ten thousand of them in seconds.

use idem_core::Trigger;

use crate::rng::SplitMix64;
use crate::{Fault, Job, LEASE_MS, LedgerMode, PausePoint, RunSpec, STEP_MS, Scenario};

/// The most calls one run makes: lock, then per invoice check, charge and
/// record, then release.
fn max_calls(customers: usize) -> u64 {
    3 * customers as u64 + 2
}

pub(super) fn scenario(seed: u64) -> Scenario {
    let mut rng = SplitMix64::new(seed);
    let customers = rng.range(1, 3) as usize;
    let mut job = Job::new(customers);
    // A tenant per seed: seeds sharing one store never share a key.
    job.tenant = format!("acme-{seed}");
    let mut s = Scenario::new(seed, job);
    s.ledger = match rng.below(4) {
        0 => LedgerMode::NAIVE,
        1 => LedgerMode::KEYS,
        2 => LedgerMode::FENCES,
        _ => LedgerMode::BOTH,
    };
    let runs = rng.range(2, 3) as usize;
    let mut latest_end = 0u64;
    for r in 0..runs {
        let (name, trigger, start_ms) = if r == 0 {
            ("nightly".to_string(), Trigger::Scheduled, 0)
        } else {
            let trigger = match rng.below(3) {
                0 => Trigger::Retry,
                1 => Trigger::Scheduled,
                _ => Trigger::Manual,
            };
            // A fifth of the extra runs fire at the same moment as the
            // first; the others within one and a half leases.
            let start = if rng.chance(20) {
                0
            } else {
                rng.range(0, LEASE_MS * 3 / 2)
            };
            (format!("run-{r}-{}", trigger.as_str()), trigger, start)
        };
        let mut run = RunSpec::new(name, trigger, start_ms);
        let mut busy_ms = 0;
        if rng.chance(45) {
            let ms = rng.range(LEASE_MS / 2, 2 * LEASE_MS);
            busy_ms += ms;
            run = run.with(Fault::Pause {
                invoice: rng.below(customers as u64) as usize,
                at: if rng.chance(50) {
                    PausePoint::BeforeCharge
                } else {
                    PausePoint::BeforeComplete
                },
                ms,
            });
        }
        if rng.chance(20) {
            run = run.with(Fault::CrashAfterCharge {
                invoice: rng.below(customers as u64) as usize,
            });
        }
        if rng.chance(20) {
            run = run.with(Fault::LoseCompletion {
                invoice: rng.below(customers as u64) as usize,
            });
        }
        let mut latency = 0;
        if rng.chance(25) {
            latency = rng.range(1_000, 90_000);
            run = run.with(Fault::SlowStore { extra_ms: latency });
        }
        busy_ms += max_calls(customers) * (STEP_MS + latency);
        latest_end = latest_end.max(start_ms + busy_ms);
        s.runs.push(run);
    }
    // The operator's clean reconciling run, once every run has ended and
    // every lease has expired: it settles what can be settled and leaves
    // the rest for review, so the invariants can speak about every invoice.
    s.runs.push(RunSpec::new(
        "reconcile",
        Trigger::Manual,
        latest_end + LEASE_MS + STEP_MS,
    ));
    s
}
