//! The job runner (`idem::job`), in process: a real policy (built .wasm)
//! over a real SQLite file, the effect a closure that counts how often it
//! ran for each key. `idem run` is the same runner behind the CLI (see
//! `cli.rs`, `ownership.rs`, `fleet.rs`).

use std::collections::{HashMap, HashSet};
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use idem::core::{Operation, OperationLimits};
use idem::engine::{Engine, EngineError, EngineOptions, ExecContext, Failed};
use idem::job::{
    EffectOutcome, End, JobError, JobEvent, JobLeaseOptions, JobOptions, JobRunner, Ownership,
    Summary,
};
use idem::store::{
    JobLeaseAcquire, ListFilter, Outcome, RecordState, SqliteOptions, SqliteStore, Store,
    StoreOptions,
};
use idem_tests::load;

const OPERATIONS: usize = 24;

fn charge(customer: usize) -> Operation {
    let json = format!(
        r#"{{"kind":"charge","tenant":"acme","fields":{{"customer":"c{customer}","billing_period":"2026-11","invoice_id":"inv-{customer}","amount":"100","currency":"EUR"}},"run":{{"run_id":"nightly","trigger":"scheduled","attempt":1}}}}"#
    );
    Operation::from_json(&json, &OperationLimits::default()).unwrap()
}

fn job() -> Vec<Operation> {
    (0..OPERATIONS).map(charge).collect()
}

struct Setup {
    _dir: tempfile::TempDir,
    store: Store,
}

fn sqlite() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(
        &dir.path().join("idem.db"),
        SqliteOptions::default(),
        StoreOptions::default(),
    )
    .unwrap();
    Setup {
        _dir: dir,
        store: store.into(),
    }
}

fn engine(setup: &Setup) -> Engine {
    Engine::new(
        load("billing-charge"),
        setup.store.clone(),
        EngineOptions::default(),
    )
}

/// Several at once, in batches smaller than the job, so that claims and
/// completions are batched and the batches are refilled.
fn options() -> JobOptions {
    JobOptions {
        concurrency: NonZeroUsize::new(6).unwrap(),
        claim_batch: NonZeroUsize::new(4).unwrap(),
        finish_batch: NonZeroUsize::new(4).unwrap(),
        ..JobOptions::default()
    }
}

/// How often the effect ran for each key, and under which contexts.
#[derive(Clone, Default)]
struct Ledger(Arc<Mutex<HashMap<String, Vec<ExecContext>>>>);

impl Ledger {
    fn record(&self, ctx: &ExecContext) {
        self.0
            .lock()
            .unwrap()
            .entry(ctx.key.clone())
            .or_default()
            .push(ctx.clone());
    }

    fn runs_per_key(&self) -> Vec<usize> {
        self.0.lock().unwrap().values().map(Vec::len).collect()
    }

    fn keys(&self) -> usize {
        self.0.lock().unwrap().len()
    }
}

/// An effect that charges (records the call) and succeeds.
fn charging(
    ledger: &Ledger,
) -> impl Fn(Operation, ExecContext) -> std::future::Ready<EffectOutcome> + Send + Sync + 'static {
    let ledger = ledger.clone();
    move |_op, ctx| {
        ledger.record(&ctx);
        std::future::ready(EffectOutcome::Completed(Outcome::new(
            0,
            format!("charged under fence {}", ctx.fence).into_bytes(),
        )))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_job_run_twice_runs_each_effect_once() {
    let s = sqlite();
    let ledger = Ledger::default();
    let events = Arc::new(Mutex::new(Vec::new()));
    let seen = events.clone();
    let runner = JobRunner::new(engine(&s), options()).on_event(move |event| {
        let event = match event {
            JobEvent::Started { operations } => format!("started {operations}"),
            JobEvent::Ended { end, .. } => format!("{end:?}"),
            JobEvent::Skipped { position, .. } => format!("skipped {position}"),
            JobEvent::Warning(message) => format!("warning {message}"),
            other => format!("{other:?}"),
        };
        seen.lock().unwrap().push(event);
    });

    let first = runner.run(job(), charging(&ledger)).await.unwrap();
    assert_eq!(
        first,
        Summary {
            executed: OPERATIONS as u64,
            ..Summary::default()
        }
    );
    assert!(first.all_completed());
    // The nightly job runs again (a manual re-run): everything replays.
    let second = runner.run(job(), charging(&ledger)).await.unwrap();
    assert_eq!(
        second,
        Summary {
            replayed: OPERATIONS as u64,
            ..Summary::default()
        }
    );
    assert_eq!(ledger.keys(), OPERATIONS, "one key per operation");
    assert!(
        ledger.runs_per_key().iter().all(|&n| n == 1),
        "{:?}",
        ledger.runs_per_key()
    );
    // Every run says how many it will settle, then reports each end.
    let events = events.lock().unwrap();
    assert_eq!(events.len(), 2 * (OPERATIONS + 1), "{events:?}");
    assert_eq!(events[0], format!("started {OPERATIONS}"));
    assert_eq!(events[OPERATIONS + 1], format!("started {OPERATIONS}"));
    let ends = |from: usize, end: End| {
        events[from..from + OPERATIONS]
            .iter()
            .all(|e| *e == format!("{end:?}"))
    };
    assert!(ends(1, End::Executed), "{events:?}");
    assert!(ends(OPERATIONS + 2, End::Replayed), "{events:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rerun_after_a_partial_failure_runs_only_what_failed() {
    let s = sqlite();
    let ledger = Ledger::default();
    let runner = JobRunner::new(engine(&s), options());
    // The first run: every third charge fails (retryable), c1's cannot
    // start at all, and c2's ends unknown (nothing recorded).
    let flaky = {
        let ledger = ledger.clone();
        move |op: Operation, ctx: ExecContext| {
            ledger.record(&ctx);
            let customer = op.fields["customer"].as_material().to_string();
            async move {
                match customer.as_str() {
                    "c1" => EffectOutcome::NotStarted {
                        outcome: Outcome::error(127, "no route to the provider"),
                        reason: "no route to the provider".into(),
                    },
                    "c2" => EffectOutcome::Unknown {
                        reason: "the provider hung up mid-request".into(),
                    },
                    c if c.trim_start_matches('c').parse::<usize>().unwrap() % 3 == 0 => {
                        EffectOutcome::Failed(Failed {
                            retryable: true,
                            outcome: Outcome::error(503, "provider unavailable"),
                        })
                    }
                    _ => EffectOutcome::Completed(Outcome::new(0, b"ok".to_vec())),
                }
            }
        }
    };
    let first = runner.run(job(), flaky).await.unwrap();
    let failing = (0..OPERATIONS).filter(|i| i % 3 == 0).count() as u64;
    assert_eq!(
        first,
        Summary {
            executed: OPERATIONS as u64 - failing - 2,
            failed: failing + 1,
            unknown: 1,
            ..Summary::default()
        }
    );
    assert!(!first.all_completed());

    // The re-run executes exactly the failures, each as a take-over; the
    // claim whose outcome is unknown is still held (its lease runs), so it
    // is in progress, never run blindly.
    let second = runner.run(job(), charging(&ledger)).await.unwrap();
    assert_eq!(
        second,
        Summary {
            executed: failing + 1,
            replayed: OPERATIONS as u64 - failing - 2,
            in_progress: 1,
            ..Summary::default()
        }
    );
    let ledger = ledger.0.lock().unwrap();
    let twice: Vec<_> = ledger.values().filter(|runs| runs.len() == 2).collect();
    assert_eq!(twice.len() as u64, failing + 1);
    assert!(
        twice
            .iter()
            .all(|runs| runs[1].take_over && runs[1].attempt == 2)
    );
    assert!(ledger.values().all(|runs| runs.len() <= 2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn shards_split_the_job_and_together_run_it_once() {
    let s = sqlite();
    let ledger = Ledger::default();
    let mut summaries = Vec::new();
    for shard in 0..3 {
        let options = JobOptions {
            ownership: Some(Ownership::shard("nightly", shard, 3)),
            ..options()
        };
        let runner = JobRunner::new(engine(&s), options);
        summaries.push(runner.run(job(), charging(&ledger)).await.unwrap());
    }
    for summary in &summaries {
        assert_eq!(summary.executed + summary.not_owned, OPERATIONS as u64);
        assert!(summary.all_completed(), "{summary:?}");
    }
    let executed: u64 = summaries.iter().map(|s| s.executed).sum();
    assert_eq!(executed, OPERATIONS as u64);
    assert!(ledger.runs_per_key().iter().all(|&n| n == 1));
    // Each effect was told the partition the policy derived.
    let ledger = ledger.0.lock().unwrap();
    assert!(
        ledger
            .values()
            .all(|runs| runs[0].partition.starts_with('c'))
    );
}

#[tokio::test]
async fn a_held_job_lease_or_a_refused_operation_runs_nothing() {
    let s = sqlite();
    let ledger = Ledger::default();
    // Another live run holds the job lease.
    let JobLeaseAcquire::Acquired(_) = s
        .store
        .ownership()
        .acquire_job_lease("nightly", "elsewhere", Duration::from_secs(60))
        .await
        .unwrap()
    else {
        panic!("a fresh store's job lease is free");
    };
    let options = JobOptions {
        job_lease: Some(JobLeaseOptions::new(
            "nightly",
            Duration::from_secs(60),
            Some("n2"),
        )),
        ..options()
    };
    let runner = JobRunner::new(engine(&s), options);
    match runner.run(job(), charging(&ledger)).await {
        Err(JobError::JobLeaseHeld { current, .. }) => assert_eq!(current.holder, "elsewhere"),
        other => panic!("expected the job lease to be held, got {other:?}"),
    }

    // An operation the policy refuses stops the run before anything is
    // claimed (and before the job lease is even asked for).
    let mut ops = job();
    ops.insert(
        5,
        Operation::from_json(
            r#"{"kind":"charge","tenant":"acme","fields":{}}"#,
            &OperationLimits::default(),
        )
        .unwrap(),
    );
    match runner.run(ops, charging(&ledger)).await {
        Err(JobError::Derive {
            position: 5,
            error: EngineError::Refused(_),
            ..
        }) => {}
        other => panic!("expected a refusal of operation 5, got {other:?}"),
    }
    assert_eq!(ledger.keys(), 0);
    assert!(
        s.store
            .records()
            .list(Default::default())
            .await
            .unwrap()
            .is_empty()
    );
}

/// Only operations about to start are claimed: however large the claim
/// batch, no more operations are claimed and not yet ended than there are
/// slots (here two). So a run that crashes leaves only operations whose
/// effect had started looking unfinished, never ones it merely queued.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn claims_never_run_ahead_of_the_free_slots() {
    let s = sqlite();
    let (store, most) = (s.store.clone(), Arc::new(AtomicUsize::new(0)));
    let ended = Arc::new(Mutex::new(HashSet::new()));
    let options = JobOptions {
        concurrency: NonZeroUsize::new(2).unwrap(),
        claim_batch: NonZeroUsize::new(64).unwrap(),
        finish_batch: NonZeroUsize::new(1).unwrap(),
        ..JobOptions::default()
    };
    let seen = most.clone();
    let summary = JobRunner::new(engine(&s), options)
        .run(job(), move |_op: Operation, ctx: ExecContext| {
            let (store, seen, ended) = (store.clone(), seen.clone(), ended.clone());
            async move {
                // Give the dispatcher a chance to claim ahead, were it to.
                tokio::task::yield_now().await;
                let in_progress = store
                    .records()
                    .list(ListFilter {
                        state: Some(RecordState::InProgress),
                        ..ListFilter::default()
                    })
                    .await
                    .unwrap();
                // Those whose effect ended are only waiting to be recorded:
                // they hold no claim of the run's any more.
                let done = ended.lock().unwrap().clone();
                let held = in_progress
                    .iter()
                    .filter(|r| !done.contains(&r.record.key.digest.to_hex()))
                    .count();
                seen.fetch_max(held, Ordering::SeqCst);
                ended.lock().unwrap().insert(ctx.key.clone());
                EffectOutcome::Completed(Outcome::new(0, b"ok".to_vec()))
            }
        })
        .await
        .unwrap();
    assert_eq!(summary.executed, OPERATIONS as u64, "{summary:?}");
    let most = most.load(Ordering::SeqCst);
    assert!(
        (1..=4).contains(&most),
        "{most} claimed and not ended at once"
    );
}
