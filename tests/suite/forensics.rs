//! Why did it run twice: the seed's scenarios run by the simulation
//! through the real engine and policies, on every store; the attempt log
//! each leaves is classified, and every store must tell the same story.

use idem::core::Trigger;
use idem::forensics::{Analysis, Cause, analyse};
use idem::policy::LoadedPolicy;
use idem::store::{
    AttemptEvent, AttemptFilter, ManualClock, MemoryStore, SqliteOptions, SqliteStore, Store,
    StoreOptions,
};
use idem_sim::{Fault, Guard, Job, LEASE_MS, LedgerMode, PausePoint, RunSpec, Scenario, simulate};
use idem_store_conformance::{drop_postgres_schema, fresh_schema};

/// `url` with `idem_schema=schema` and a small pool.
fn schema_url(url: &str, schema: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}idem_schema={schema}&idem_pool_size=2")
}
use idem_tests::{load, postgres_url};

const START_MS: u64 = 1_800_000_000_000;
const MINUTE: u64 = 60_000;

/// A fresh store of each kind on a manual clock; PostgreSQL when the test
/// database is configured (else SKIPPED, a failure under `CI=true`).
async fn stores(test: &str) -> Vec<(String, Store, ManualClock, Cleanup)> {
    let mut out: Vec<(String, Store, ManualClock, Cleanup)> = Vec::new();
    let options = |clock: &ManualClock| StoreOptions {
        clock: clock.store_clock(),
        ..StoreOptions::default()
    };
    let clock = ManualClock::new(START_MS);
    out.push((
        "memory".into(),
        MemoryStore::new(options(&clock)).into(),
        clock,
        Cleanup::None,
    ));
    let clock = ManualClock::new(START_MS);
    let dir = tempfile::tempdir().expect("tempdir");
    let sqlite = SqliteStore::open(
        &dir.path().join("idem.db"),
        SqliteOptions::default(),
        options(&clock),
    )
    .expect("sqlite");
    out.push(("sqlite".into(), sqlite.into(), clock, Cleanup::Dir(dir)));
    if let Some(url) = postgres_url(&format!("forensics::{test}")) {
        let clock = ManualClock::new(START_MS);
        let url = schema_url(&url, &fresh_schema());
        let store = idem::store::open(&url, options(&clock))
            .await
            .expect("postgres");
        out.push(("postgres".into(), store, clock, Cleanup::Schema(url)));
    }
    out
}

enum Cleanup {
    None,
    Dir(#[allow(dead_code)] tempfile::TempDir),
    Schema(String),
}

impl Cleanup {
    async fn run(self) {
        if let Cleanup::Schema(url) = self {
            drop_postgres_schema(&url);
        }
    }
}

/// Runs `scenario` on every store and classifies each store's log; the
/// analyses must agree (up to fences and ids, which each store issues
/// from its own sequence) and are returned with the store's name.
async fn classified(
    test: &str,
    scenario: &Scenario,
    policy: &LoadedPolicy,
) -> Vec<(String, Analysis)> {
    let mut out = Vec::new();
    for (name, store, clock, cleanup) in stores(test).await {
        let guard = Guard::Idem {
            policy: policy.clone(),
            store: store.clone(),
        };
        simulate(scenario, &guard, &clock).await.expect("simulate");
        let log = store
            .records()
            .attempts(AttemptFilter::default())
            .await
            .expect("the attempt log");
        assert!(
            log.windows(2).all(|w| w[0].id < w[1].id),
            "{name}: ids in order"
        );
        out.push((name, analyse(&log)));
        cleanup.run().await;
    }
    let story = |a: &Analysis| {
        let mut per_key: Vec<(Cause, usize, usize, usize, Vec<String>)> = a
            .duplicates
            .iter()
            .map(|d| (d.cause, d.asks, d.executions, d.fenced, d.runs.clone()))
            .collect();
        per_key.sort();
        (a.entries, a.keys, per_key, a.runs.clone())
    };
    let (first, rest) = out.split_first().expect("at least one store");
    for (name, analysis) in rest {
        assert_eq!(
            story(analysis),
            story(&first.1),
            "{name} tells another story than {}",
            first.0
        );
    }
    out
}

fn counts(a: &Analysis) -> Vec<(Cause, usize)> {
    a.causes()
}

// The paused holder: the nightly run pauses 7 minutes before charging c03
// (lease 5 minutes); the scheduler's retry starts at 5m30s. Every key both
// runs asked for is the retry's doing; c03 was sent to review, and the
// paused run's late write was refused.
#[tokio::test]
async fn a_scheduler_retry_past_the_lease_is_named() {
    let mut scenario = Scenario::new(1, Job::new(5));
    scenario.runs = vec![
        RunSpec::new("nightly", Trigger::Scheduled, 0).with(Fault::Pause {
            invoice: 2,
            at: PausePoint::BeforeComplete,
            ms: 7 * MINUTE,
        }),
        RunSpec::new("retry", Trigger::Retry, LEASE_MS + 30_000),
    ];
    for (name, a) in classified("scheduler_retry", &scenario, &load("billing-charge")).await {
        assert_eq!(
            counts(&a),
            vec![(Cause::SchedulerRetry, 5)],
            "{name}: {a:#?}"
        );
        let c03 = a
            .duplicates
            .iter()
            .find(|d| d.fenced > 0)
            .unwrap_or_else(|| panic!("{name}: the paused run's late write: {a:#?}"));
        assert_eq!(c03.runs, vec!["nightly", "retry"], "{name}");
        assert!(
            c03.explanation.contains("still running"),
            "{name}: {}",
            c03.explanation
        );
        let nightly = a.runs.iter().find(|r| r.run == "nightly").expect("nightly");
        assert_eq!((nightly.executed, nightly.fenced), (3, 1), "{name}");
        assert_eq!(nightly.trigger.as_deref(), Some("scheduled"));
        let lines = a.summary_lines();
        assert!(
            lines[0].starts_with("5 duplicates prevented: the scheduler retried"),
            "{name}: {lines:?}"
        );
    }
}

// A policy that re-executes an expired claim (the fixture), a run that
// crashed after charging c02, an early retry within the lease (told "in
// progress"), and a manual re-run after the lease that takes over.
#[tokio::test]
async fn a_take_over_after_a_crash_is_named() {
    let mut scenario = Scenario::new(
        5,
        Job {
            invoice_in_tenant: true,
            ..Job::new(3)
        },
    );
    scenario.ledger = LedgerMode::KEYS;
    scenario.runs = vec![
        RunSpec::new("nightly", Trigger::Scheduled, 0).with(Fault::CrashAfterCharge { invoice: 1 }),
        RunSpec::new("early-retry", Trigger::Retry, MINUTE),
        RunSpec::new("rerun", Trigger::Manual, 30 * MINUTE),
    ];
    for (name, a) in classified("take_over", &scenario, &load("fixture-misbehaving")).await {
        let over: Vec<_> = a
            .duplicates
            .iter()
            .filter(|d| d.cause == Cause::TakeOverAfterPause)
            .collect();
        assert_eq!(over.len(), 1, "{name}: {a:#?}");
        assert_eq!(over[0].executions, 2, "{name}: both may have charged");
        assert!(
            over[0].explanation.contains("never wrote again"),
            "{name}: {}",
            over[0].explanation
        );
        // The other invoices were asked for once each (the runs skip
        // what their own bookkeeping says was charged).
        assert_eq!(
            counts(&a),
            vec![(Cause::TakeOverAfterPause, 1)],
            "{name}: {a:#?}"
        );
    }
}

// Two instances fired at once: every key both asked for overlapped.
#[tokio::test]
async fn two_instances_at_once_are_named() {
    let mut scenario = Scenario::new(3, Job::new(6));
    scenario.runs = vec![
        RunSpec::new("instance-a", Trigger::Scheduled, 0),
        RunSpec::new("instance-b", Trigger::Scheduled, 0),
    ];
    for (name, a) in classified("overlap", &scenario, &load("billing-charge")).await {
        let causes = counts(&a);
        assert_eq!(causes.len(), 1, "{name}: {a:#?}");
        assert_eq!(causes[0].0, Cause::Overlap, "{name}");
        assert!(causes[0].1 >= 1, "{name}");
        assert!(a.duplicates.iter().all(|d| d.executions == 1), "{name}");
    }
}

// A manual re-run after the nightly run was killed after charging c03.
#[tokio::test]
async fn a_manual_rerun_after_a_partial_failure_is_named() {
    let mut scenario = Scenario::new(4, Job::new(6));
    scenario.runs = vec![
        RunSpec::new("nightly", Trigger::Scheduled, 0).with(Fault::CrashAfterCharge { invoice: 2 }),
        RunSpec::new("manual-rerun", Trigger::Manual, 60 * MINUTE),
    ];
    for (name, a) in classified("manual", &scenario, &load("billing-charge")).await {
        assert_eq!(counts(&a), vec![(Cause::ManualRerun, 3)], "{name}: {a:#?}");
        assert!(
            a.duplicates
                .iter()
                .all(|d| d.explanation.contains("with an attempt unfinished")),
            "{name}: {a:#?}"
        );
        let rerun = a
            .runs
            .iter()
            .find(|r| r.run == "manual-rerun")
            .expect("rerun");
        assert_eq!((rerun.executed, rerun.replayed), (3, 2), "{name}");
    }
}

// Key drift: a manual re-run under a policy that derives other keys
// charges c01..c03 again; idem could not catch it, and says so first.
#[tokio::test]
async fn key_drift_is_named_first() {
    let mut scenario = Scenario::new(
        6,
        Job {
            invoice_in_tenant: true,
            ..Job::new(4)
        },
    );
    scenario.ledger = LedgerMode::BOTH;
    scenario.runs = vec![
        RunSpec::new("nightly", Trigger::Scheduled, 0).with(Fault::CrashAfterCharge { invoice: 2 }),
        RunSpec::new("manual-rerun", Trigger::Manual, 60 * MINUTE)
            .with_policy(load("fixture-misbehaving")),
    ];
    for (name, a) in classified("drift", &scenario, &load("billing-charge")).await {
        assert_eq!(counts(&a), vec![(Cause::KeyDrift, 3)], "{name}: {a:#?}");
        let drift = a.duplicates[0].drift.as_ref().expect("both sides");
        assert_ne!(drift.earlier_policy, drift.later_policy, "{name}");
        assert!(
            a.summary_lines()[0].starts_with("3 duplicates NOT prevented: key drift"),
            "{name}: {:?}",
            a.summary_lines()
        );
        assert_eq!(a.duplicates[0].runs, vec!["nightly", "manual-rerun"]);
    }
}

// Every entry a mixed history writes is one the log's vocabulary names,
// and every answer the runs got is there once the engine flushed.
#[tokio::test]
async fn the_log_holds_every_answer() {
    let mut scenario = Scenario::new(2, Job::new(4));
    scenario.runs = vec![
        RunSpec::new("a", Trigger::Scheduled, 0),
        RunSpec::new("b", Trigger::Scheduled, 0),
        RunSpec::new("c", Trigger::Manual, 30 * MINUTE),
    ];
    for (name, store, clock, cleanup) in stores("every_answer").await {
        let guard = Guard::Idem {
            policy: load("billing-charge"),
            store: store.clone(),
        };
        let report = simulate(&scenario, &guard, &clock).await.expect("simulate");
        let log = store
            .records()
            .attempts(AttemptFilter::default())
            .await
            .expect("log");
        let count = |event| log.iter().filter(|e| e.event == event).count() as u64;
        assert_eq!(count(AttemptEvent::Executed), 4, "{name}");
        assert_eq!(count(AttemptEvent::Completed), 4, "{name}");
        assert_eq!(
            count(AttemptEvent::Replayed),
            report.counters.replays,
            "{name}"
        );
        assert_eq!(
            count(AttemptEvent::InProgress),
            report.counters.in_progress,
            "{name}"
        );
        cleanup.run().await;
    }
}

// What a service's metrics recorder is told: begins by answer, their
// latency, finishes by ending and result.
#[test]
fn the_engine_counts_through_the_metrics_facade() {
    use idem::engine::{Begin, Engine, EngineOptions};
    use idem::store::Outcome;
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};

    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(async {
                let store = idem::store::Store::from(MemoryStore::new(StoreOptions::default()));
                let engine = Engine::new(load("billing-charge"), store, EngineOptions::default());
                let op = Job::new(1).operation(0, &RunSpec::new("r", Trigger::Scheduled, 0));
                let Begin::Execute(execution) = engine.begin(&op).await.unwrap() else {
                    panic!("a fresh key executes");
                };
                execution.complete(Outcome::new(0, "ok")).await.unwrap();
                assert!(matches!(engine.begin(&op).await.unwrap(), Begin::Replay(_)));
                engine.flush_log().await;
            });
    });
    let seen: Vec<(String, Vec<String>, DebugValue)> = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _, _, value)| {
            let key = key.key();
            let labels = key
                .labels()
                .map(|l| format!("{}={}", l.key(), l.value()))
                .collect();
            (key.name().to_string(), labels, value)
        })
        .collect();
    let counter = |name: &str, labels: &[&str]| {
        seen.iter()
            .find(|(n, l, _)| n == name && l.iter().map(String::as_str).eq(labels.iter().copied()))
            .map(|(_, _, v)| v)
    };
    assert_eq!(
        counter("idem_begin_total", &["answer=execute"]),
        Some(&DebugValue::Counter(1)),
        "{seen:?}"
    );
    assert_eq!(
        counter("idem_begin_total", &["answer=replay"]),
        Some(&DebugValue::Counter(1))
    );
    assert_eq!(
        counter("idem_finish_total", &["ending=completed", "result=ok"]),
        Some(&DebugValue::Counter(1))
    );
    match counter("idem_begin_seconds", &[]) {
        Some(DebugValue::Histogram(samples)) => assert_eq!(samples.len(), 2),
        other => panic!("the begin latency: {other:?}"),
    }
}
