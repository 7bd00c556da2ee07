//! The seed's scenarios with each charge written in the store's own
//! transaction (`Guard::InStore`): the charge and the holder's completion
//! commit together, so under the same faults no invoice is charged twice
//! and nothing waits for a person — the expired claims are known to have
//! charged nothing and are re-executed by `billing-charge` itself. On a
//! SQLite file and in a PostgreSQL schema (the in-memory store has no
//! transaction to share).

use idem::core::{RecordState, Trigger};
use idem_sim::{Fault, Guard, Job, LEASE_MS, PausePoint, Report, RunSpec, Scenario, simulate};
use idem_tests::load;

use super::{Db, MINUTE, charges, fixture, paused_holder, show};

async fn in_store(db: &Db, scenario: &Scenario) -> Report {
    let s = fixture(db).await;
    let guard = Guard::InStore {
        policy: load("billing-charge"),
        store: s.store.clone(),
    };
    simulate(scenario, &guard, &s.clock).await.unwrap()
}

/// Every invoice charged once and completed, nothing for review.
fn settled_once(r: &Report, customers: usize) {
    if let Err(violations) = r.check_in_store(true) {
        panic!("{violations:#?}\n{}", show(r));
    }
    assert_eq!(charges(r), vec![1; customers], "{}", show(r));
    assert!(
        r.invoices
            .iter()
            .all(|i| i.record == Some(RecordState::Completed)),
        "{}",
        show(r)
    );
}

// The paused holder: the retry re-executes the expired claim (it charged
// nothing), and the paused run's commit is fenced and rolled back.
async fn a_paused_holder_is_fenced_inside_its_transaction(db: Db) {
    let r = in_store(&db, &paused_holder(Job::new(5))).await;
    settled_once(&r, 5);
    let c = &r.counters;
    assert_eq!((c.fenced_writes, c.marked_unknown), (1, 0), "{}", show(&r));
    assert!(
        r.trace
            .iter()
            .any(|l| l.contains("retry") && l.contains("take-over true")),
        "the retry took the expired claim over: {}",
        show(&r)
    );
}

// A stalled run (a slow store, a pause before its commit): the retry
// re-executes the stalled invoice, the stalled commit is fenced.
async fn a_stalled_commit_is_fenced_and_the_retry_charges_once(db: Db) {
    let mut scenario = Scenario::new(2, Job::new(5));
    scenario.trace = true;
    scenario.runs = vec![
        RunSpec::new("nightly", Trigger::Scheduled, 0)
            .with(Fault::SlowStore { extra_ms: 20_000 })
            .with(Fault::Pause {
                invoice: 1,
                at: PausePoint::BeforeComplete,
                ms: 10 * MINUTE,
            }),
        RunSpec::new("nightly-retry", Trigger::Retry, 10 * MINUTE),
    ];
    let r = in_store(&db, &scenario).await;
    settled_once(&r, 5);
    assert_eq!(r.counters.fenced_writes, 1, "{}", show(&r));
}

// A crash inside the transaction and a lost commit: the charge is lost
// with its end, and the later runs charge it once.
async fn a_crash_or_a_lost_commit_loses_the_charge_with_its_end(db: Db) {
    let mut scenario = Scenario::new(5, Job::new(4));
    scenario.trace = true;
    scenario.runs = vec![
        RunSpec::new("nightly", Trigger::Scheduled, 0).with(Fault::CrashAfterCharge { invoice: 1 }),
        // Within the lease: in progress elsewhere, not charged.
        RunSpec::new("early-retry", Trigger::Retry, MINUTE)
            .with(Fault::LoseCompletion { invoice: 2 }),
        RunSpec::new("rerun", Trigger::Manual, 30 * MINUTE),
        RunSpec::new("rerun-again", Trigger::Manual, 60 * MINUTE),
    ];
    let r = in_store(&db, &scenario).await;
    settled_once(&r, 4);
    let c = &r.counters;
    assert_eq!((c.crashes, c.lost_completions), (1, 1), "{}", show(&r));
}

// Two instances fired at once: one charges each invoice, the other waits
// or replays.
async fn two_instances_at_once_charge_each_invoice_once(db: Db) {
    let mut scenario = Scenario::new(4, Job::new(6));
    scenario.trace = true;
    scenario.runs = vec![
        RunSpec::new("instance-a", Trigger::Scheduled, 0),
        RunSpec::new("instance-b", Trigger::Scheduled, 0),
        RunSpec::new("reconcile", Trigger::Manual, LEASE_MS + 10 * MINUTE),
    ];
    let r = in_store(&db, &scenario).await;
    settled_once(&r, 6);
}

on_both_stores!(
    a_paused_holder_is_fenced_inside_its_transaction,
    a_stalled_commit_is_fenced_and_the_retry_charges_once,
    a_crash_or_a_lost_commit_loses_the_charge_with_its_end,
    two_instances_at_once_charge_each_invoice_once,
);

/// Random schedules (every fault, 2–3 overlapping runs and a reconciling
/// run) with the charges in the store's transaction, on SQLite and (with
/// `IDEM_TEST_POSTGRES_URL`) PostgreSQL: each checked by
/// `Report::check_in_store` — at most one charge per invoice, nothing
/// outcome-unknown or sent to review, and after the reconciling run every
/// invoice charged exactly once — and the two stores' reports alike.
/// `IDEM_CHAOS_IN_STORE_SEEDS` seeds (default 100).
#[tokio::test]
async fn randomised_schedules_with_the_charge_in_the_store_never_need_a_person() {
    let seeds = super::env_u64("IDEM_CHAOS_IN_STORE_SEEDS").unwrap_or(100);
    let pg = Db::postgres("randomised_in_store");
    let mut failures = Vec::new();
    for seed in 0..seeds {
        let scenario = Scenario::random(seed);
        let sqlite = in_store(&Db::Sqlite, &scenario).await;
        if let Err(v) = sqlite.check_in_store(true) {
            failures.push((seed, "SQLite", v));
        }
        if let Some(db) = &pg {
            let postgres = in_store(db, &scenario).await;
            if let Err(v) = postgres.check_in_store(true) {
                failures.push((seed, "PostgreSQL", v));
            }
            if let Some(d) = super::disagreement("PostgreSQL", &sqlite, &postgres) {
                failures.push((seed, "PostgreSQL against SQLite", vec![d]));
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}
