//! A claim whose effect commits with its end never goes to review: once
//! its lease is over (store clock) it waits for no person, the next
//! duplicate re-executes it under a higher fence (the policy is
//! `billing-charge`, which sends any other expired claim to review), the
//! late holder's commit is refused inside its own transaction with its
//! business row rolled back, and forensics names the case.

use std::time::Duration;

use idem::engine::{Begin, Engine, EngineError, EngineOptions, Execution, RunResult};
use idem::forensics::{self, Cause, ShownEvent};
use idem::store::{
    AttemptEvent, AttemptFilter, Database, ManualClock, Outcome, RecordState, Store, StoreError,
    StoreOptions, rusqlite,
};
use idem_tests::load;

use super::{OnPostgres, charge, on_clock};

/// The policy: it sends any other expired claim to review.
const POLICY: &str = "billing-charge";

/// The store's clock at the start.
fn start_clock() -> ManualClock {
    ManualClock::new(1_800_000_000_000)
}

/// A store on a manual clock, and an engine with the standard policy.
async fn engine_on(url: &str) -> (Engine, Store, ManualClock) {
    let clock = start_clock();
    let store = idem::store::open(url, on_clock(&clock)).await.unwrap();
    let engine = Engine::new(load(POLICY), store.clone(), EngineOptions::default());
    (engine, store, clock)
}

/// The first holder's claim, past its five-minute lease: it waits for no
/// person, and says it will re-execute.
async fn expired_atomic_claim(engine: &Engine, store: &Store, clock: &ManualClock) -> Execution {
    let Begin::Execute(old) = engine.begin_in_store(&charge("inv-1")).await.unwrap() else {
        panic!("the first begin executes");
    };
    let record = store.records().get(old.key()).await.unwrap().unwrap();
    assert!(record.record.effect_atomic, "{record:?}");
    clock.advance(Duration::from_secs(6 * 60));
    assert!(
        forensics::review::waiting_records(store, None)
            .await
            .unwrap()
            .is_empty(),
        "an expired atomic claim waits for no person"
    );
    let re_executing = forensics::review::re_executing_records(store, None)
        .await
        .unwrap();
    assert_eq!(re_executing.len(), 1, "{re_executing:?}");
    old
}

/// What the duplicate's run came to: executed under a higher fence, as a
/// take-over.
fn re_executed(result: Result<RunResult, EngineError>, old: &Execution) -> u64 {
    match result.unwrap() {
        RunResult::Executed {
            fence,
            attempt,
            result: Ok(_),
            ..
        } => {
            assert!(fence > old.fence());
            assert_eq!(attempt, 2);
            fence
        }
        other => panic!("the duplicate re-executes: {other:?}"),
    }
}

/// The record completed under the duplicate's fence, nothing waiting for
/// review, and the log read as a re-execution of what was never done.
async fn named_as_re_executed(store: &Store, old: &Execution, fence: u64) {
    // The refusal is logged once the late transaction is over (on
    // PostgreSQL's caller-owned form, by a task beside the caller): wait
    // for it, boundedly.
    for _ in 0..500 {
        let entries = forensics::review::timeline(store, old.key()).await.unwrap();
        if entries.iter().any(|e| e.event == AttemptEvent::Fenced) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let record = store
        .records()
        .get(old.key())
        .await
        .unwrap()
        .unwrap()
        .record;
    assert_eq!(
        (record.state, record.fence),
        (RecordState::Completed, fence)
    );
    assert!(
        forensics::review::waiting_records(store, None)
            .await
            .unwrap()
            .is_empty()
    );
    let entries = forensics::review::read_log(store, AttemptFilter::default())
        .await
        .unwrap();
    let analysis = forensics::analyse(&entries);
    let [duplicate] = analysis.duplicates.as_slice() else {
        panic!("one duplicate: {:#?}", analysis.duplicates);
    };
    assert_eq!(duplicate.cause, Cause::TakeOverAfterPause);
    assert_eq!(duplicate.executions, 1, "the first attempt did nothing");
    assert_eq!(duplicate.fenced, 1, "the late holder's commit was refused");
    for words in [
        "atomic with its end, so nothing was done",
        &format!("re-executed it under fence {fence}"),
        "refused inside its own transaction",
    ] {
        assert!(
            duplicate.explanation.contains(words),
            "{words}: {}",
            duplicate.explanation
        );
    }
    let shown = forensics::shown_events(&entries);
    assert_eq!(
        shown
            .iter()
            .filter(|s| **s == ShownEvent::ReExecuted)
            .count(),
        1,
        "{shown:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_atomic_claim_re_executes_and_the_late_commit_rolls_back_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idem.db");
    let (engine, store, clock) = engine_on(&format!("sqlite:{}", path.display())).await;
    let Database::Sqlite(database) = store.database().await.unwrap() else {
        panic!("a SQLite store");
    };
    // The business table beside idem's, in the store's file.
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute("CREATE TABLE ledger (invoice TEXT, fence INTEGER)", [])
        .unwrap();
    let old = expired_atomic_claim(&engine, &store, &clock).await;

    let fence = re_executed(
        engine
            .run_once_in_sqlite(&charge("inv-1"), |tx, ctx| {
                tx.execute(
                    "INSERT INTO ledger VALUES ('inv-1', ?1)",
                    [ctx.fence as i64],
                )?;
                Ok(Outcome::new(0, "charged"))
            })
            .await,
        &old,
    );

    // The late holder writes its row and commits with its completion: the
    // fence is checked inside the transaction, which rolls back.
    let late_fence = old.fence();
    let refused = database
        .complete_in_transaction(old.key(), late_fence, move |tx| {
            tx.execute(
                "INSERT INTO ledger VALUES ('inv-1', ?1)",
                [late_fence as i64],
            )?;
            Ok(Outcome::new(0, "charged late"))
        })
        .await;
    assert!(
        matches!(refused, Err(StoreError::Fenced { .. })),
        "{refused:?}"
    );
    let db = rusqlite::Connection::open(&path).unwrap();
    let fences: Vec<i64> = db
        .prepare("SELECT fence FROM ledger")
        .unwrap()
        .query_map([], |row| row.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(fences, vec![fence as i64], "one row, the duplicate's");
    named_as_re_executed(&store, &old, fence).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_atomic_claim_re_executes_and_the_late_commit_rolls_back_postgres() {
    let clock = start_clock();
    let Some(pg) = OnPostgres::open(
        "an_expired_atomic_claim_re_executes",
        POLICY,
        on_clock(&clock),
    )
    .await
    else {
        return;
    };
    let (store, engine) = (&pg.store, &pg.engine);
    let (mut service, ledger) = pg.with_ledger().await;
    // The caller-owned form: the service begins, and will complete inside
    // its own transaction.
    let old = expired_atomic_claim(engine, store, &clock).await;

    let table = ledger.clone();
    let fence = re_executed(
        engine
            .run_once_in_postgres(&charge("inv-1"), None, async |tx, ctx| {
                tx.execute(
                    &format!("INSERT INTO {table} VALUES ('inv-1', $1)"),
                    &[&(ctx.fence as i64)],
                )
                .await?;
                Ok(Outcome::new(0, "charged"))
            })
            .await,
        &old,
    );

    let tx = service.transaction().await.unwrap();
    tx.execute(
        &format!("INSERT INTO {ledger} VALUES ('inv-1', $1)"),
        &[&(old.fence() as i64)],
    )
    .await
    .unwrap();
    let refused = old
        .complete_in_postgres(&tx, Outcome::new(0, "charged late"))
        .await;
    assert!(
        matches!(refused, Err(EngineError::Fenced(_))),
        "{refused:?}"
    );
    // Committed anyway, as a careless caller would: it rolls back.
    let _ = tx.commit().await;
    let fences: Vec<i64> = service
        .query(&format!("SELECT fence FROM {ledger}"), &[])
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert_eq!(fences, vec![fence as i64], "one row, the duplicate's");
    named_as_re_executed(store, &old, fence).await;
}

/// What the commands say: `idem review` leaves an expired atomic claim
/// out and says it will re-execute (a plain expired claim beside it still
/// waits); once a duplicate re-executed it, `idem report` names the case
/// and reads the take-over as `re-executed`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn review_and_report_name_an_expired_atomic_claim() {
    use idem_tests::idem_bin;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idem.db");
    let url = format!("sqlite:{}", path.display());
    // Claimed an hour ago by the store's clock: both five-minute leases
    // are over when the commands read with the system clock.
    let an_hour_ago = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
        - 3_600_000;
    let past = StoreOptions {
        clock: ManualClock::new(an_hour_ago).store_clock(),
        ..StoreOptions::default()
    };
    let store = idem::store::open(&url, past).await.unwrap();
    let engine = Engine::new(
        load("billing-charge"),
        store.clone(),
        EngineOptions::default(),
    );
    let Begin::Execute(atomic) = engine.begin_in_store(&charge("inv-1")).await.unwrap() else {
        panic!("the atomic claim executes");
    };
    let Begin::Execute(_plain) = engine.begin(&charge("inv-2")).await.unwrap() else {
        panic!("the plain claim executes");
    };
    engine.flush_log().await;
    drop((engine, store));
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute("CREATE TABLE ledger (invoice TEXT, fence INTEGER)", [])
        .unwrap();

    let idem = |args: &[&str]| {
        let out = std::process::Command::new(idem_bin())
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "idem {args:?}: {out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let review = idem(&["review", "--store", &url]);
    assert!(review.contains("1 record waits for review"), "{review}");
    assert!(
        review
            .contains("1 expired claim of an effect atomic with its end does not wait for review"),
        "{review}"
    );
    let listed: serde_json::Value =
        serde_json::from_str(&idem(&["review", "--store", &url, "--json"])).unwrap();
    assert_eq!(listed.as_array().unwrap().len(), 1, "{listed}");

    // The next duplicate, now: re-executed, never sent to review.
    let store = idem::store::open(&url, StoreOptions::default())
        .await
        .unwrap();
    let engine = Engine::new(
        load("billing-charge"),
        store.clone(),
        EngineOptions::default(),
    );
    re_executed(
        engine
            .run_once_in_sqlite(&charge("inv-1"), |tx, ctx| {
                tx.execute(
                    "INSERT INTO ledger VALUES ('inv-1', ?1)",
                    [ctx.fence as i64],
                )?;
                Ok(Outcome::new(0, "charged"))
            })
            .await,
        &atomic,
    );
    engine.flush_log().await;
    let report: serde_json::Value =
        serde_json::from_str(&idem(&["report", "--store", &url, "--json"])).unwrap();
    let duplicates = report["duplicates"].as_array().unwrap();
    assert_eq!(duplicates.len(), 1, "{report:#}");
    assert_eq!(duplicates[0]["cause"], "take-over-after-pause");
    assert_eq!(duplicates[0]["executions"], 1);
    let explanation = duplicates[0]["explanation"].as_str().unwrap();
    assert!(
        explanation.contains("its effect is atomic with its end, so nothing was done"),
        "{explanation}"
    );
    let timeline = idem(&["report", "--store", &url, "--key", &atomic.key_hex()]);
    assert!(timeline.contains("re-executed"), "{timeline}");
    let review = idem(&["review", "--store", &url]);
    assert!(
        !review.contains("expired claim of an effect atomic"),
        "{review}"
    );
}
