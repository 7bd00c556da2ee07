//! Effects in a PostgreSQL store's transaction: a real serialization
//! failure, a lost COMMIT answer, a deposed holder's own transaction, and
//! a take-over tried while the transaction is open.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use idem::engine::{Begin, Engine, EngineError, EngineOptions, RunResult};
use idem::store::{
    AttemptEvent, ManualClock, Outcome, RecordState, StoreError, StoreOptions, tokio_postgres,
};
use idem_tests::cut_proxy::CutProxy;
use idem_tests::load;
use idem_tests::pg_cluster::PgCluster;

use super::{OnPostgres, charge, connect, events, on_clock};

/// A SERIALIZABLE effect whose business row another client changed after
/// the transaction's snapshot fails with SQLSTATE 40001 (for real: no
/// injection); the whole transaction runs again, the effect included, and
/// only the second run's write commits. The attempt log holds no failure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_serialization_failure_runs_the_whole_transaction_again_and_is_never_recorded() {
    let Some(pg) = OnPostgres::open(
        "a_serialization_failure_runs_the_whole_transaction_again",
        "provider-charge",
        StoreOptions::default(),
    )
    .await
    else {
        return;
    };
    let (store, engine) = (&pg.store, pg.engine.clone());
    let other = pg.client().await;
    let accounts = format!("{}.accounts", pg.schema);
    other
        .batch_execute(&format!(
            "CREATE TABLE {accounts} (id int PRIMARY KEY, balance int NOT NULL); \
             INSERT INTO {accounts} VALUES (1, 0)"
        ))
        .await
        .unwrap();

    let other = Arc::new(other);
    let runs = Arc::new(AtomicU32::new(0));
    let (counted, table, writer) = (runs.clone(), accounts.clone(), other.clone());
    // Spawned: the engine's future is `Send` with an `async move` closure
    // that owns what it uses.
    let result = tokio::spawn(async move {
        engine
            .run_once_in_postgres(
                &charge("inv-1"),
                Some(tokio_postgres::IsolationLevel::Serializable),
                async move |tx, ctx| {
                    if counted.fetch_add(1, Ordering::SeqCst) == 0 {
                        // Another client changes the row after this
                        // transaction's snapshot (its first statement,
                        // idem's lock of the record, took it).
                        writer
                            .execute(
                                &format!("UPDATE {table} SET balance = balance + 100 WHERE id = 1"),
                                &[],
                            )
                            .await?;
                    }
                    tx.execute(
                        &format!("UPDATE {table} SET balance = balance + 1 WHERE id = 1"),
                        &[],
                    )
                    .await?;
                    Ok(Outcome::new(0, format!("charged at fence {}", ctx.fence)))
                },
            )
            .await
    })
    .await
    .unwrap();
    let RunResult::Executed { key, result, .. } = result.unwrap() else {
        panic!("not executed");
    };
    assert!(result.is_ok(), "{result:?}");
    assert_eq!(runs.load(Ordering::SeqCst), 2, "run again after 40001");
    let balance: i32 = other
        .query_one(&format!("SELECT balance FROM {accounts} WHERE id = 1"), &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(balance, 101, "the other client's write and one run's");
    let record = store.records().get(&key).await.unwrap().unwrap().record;
    assert_eq!(record.state, RecordState::Completed);
    assert_eq!(
        events(store, &key).await,
        [AttemptEvent::Executed, AttemptEvent::Completed],
        "a serialization failure is never recorded"
    );
}

/// The answer to the effect's COMMIT is lost (the proxy cuts the
/// connection once the server has committed): the store reads the record
/// back instead of guessing or committing again. The effect ran once, its
/// row exists once, and the run reports it executed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_commit_answer_is_read_back_not_repeated() {
    let Some(cluster) = PgCluster::start("a_lost_commit_answer_is_read_back") else {
        return;
    };
    let proxy = Arc::new(CutProxy::start(([127, 0, 0, 1], cluster.port()).into()).unwrap());
    let url = format!(
        "postgres://postgres@127.0.0.1:{}/postgres?sslmode=disable",
        proxy.port()
    );
    let store = idem::store::open(&url, StoreOptions::default())
        .await
        .unwrap();
    let engine = Engine::new(
        load("provider-charge"),
        store.clone(),
        EngineOptions::default(),
    );
    let runs = Arc::new(AtomicU32::new(0));
    let (counted, cue) = (runs.clone(), proxy.clone());
    let result = engine
        .run_once_in_postgres(&charge("inv-1"), None, async |tx, ctx| {
            counted.fetch_add(1, Ordering::SeqCst);
            tx.batch_execute("CREATE TABLE IF NOT EXISTS idem.ledger (invoice text, fence bigint)")
                .await?;
            tx.execute(
                "INSERT INTO idem.ledger VALUES ('inv-1', $1)",
                &[&(ctx.fence as i64)],
            )
            .await?;
            // Nothing else talks to this cluster: the next message carrying
            // COMMIT is this transaction's.
            cue.cut_reply_to(b"COMMIT");
            Ok(Outcome::new(0, "charged"))
        })
        .await
        .unwrap();
    assert_eq!(proxy.cuts(), 1, "the COMMIT's answer was lost");
    let RunResult::Executed {
        key, fence, result, ..
    } = result
    else {
        panic!("not executed: {result:?}");
    };
    assert_eq!(result.unwrap(), Outcome::new(0, "charged"));
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "committed once, not repeated"
    );
    let direct = connect(&cluster.url()).await;
    let rows: i64 = direct
        .query_one("SELECT count(*) FROM idem.ledger", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(rows, 1);
    let record = store.records().get(&key).await.unwrap().unwrap().record;
    assert_eq!(
        (record.state, record.fence),
        (RecordState::Completed, fence)
    );
}

/// The caller-owned form: a holder paused past its lease while another
/// took over completes in its own transaction and is refused: it gets
/// Fenced, its transaction is aborted (committing it rolls back), and its
/// business row never exists. The new holder's commits; each can ask
/// whether its completion committed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deposed_holders_own_transaction_commits_nothing() {
    let clock = ManualClock::new(1_800_000_000_000);
    let Some(pg) = OnPostgres::open(
        "a_deposed_holders_own_transaction_commits_nothing",
        "provider-charge",
        on_clock(&clock),
    )
    .await
    else {
        return;
    };
    let (store, engine) = (&pg.store, &pg.engine);
    let (mut service, ledger) = pg.with_ledger().await;
    let op = charge("inv-1");
    let Begin::Execute(old) = engine.begin(&op).await.unwrap() else {
        panic!("the first begin executes");
    };
    // Paused past its five-minute lease; the policy re-executes.
    clock.advance(Duration::from_secs(6 * 60));
    let Begin::Execute(new) = engine.begin(&op).await.unwrap() else {
        panic!("an expired claim is taken over");
    };
    assert!(new.fence() > old.fence());

    let outcome = Outcome::new(0, "charged");
    let tx = service.transaction().await.unwrap();
    tx.execute(
        &format!("INSERT INTO {ledger} VALUES ('inv-1', $1)"),
        &[&(old.fence() as i64)],
    )
    .await
    .unwrap();
    let refused = old.complete_in_postgres(&tx, outcome.clone()).await;
    assert!(
        matches!(refused, Err(EngineError::Fenced(_))),
        "{refused:?}"
    );
    // Committed anyway, as a careless caller would: it rolls back.
    let _ = tx.commit().await;
    let rows: i64 = service
        .query_one(&format!("SELECT count(*) FROM {ledger}"), &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(rows, 0, "the deposed holder's row was committed");

    let tx = service.transaction().await.unwrap();
    tx.execute(
        &format!("INSERT INTO {ledger} VALUES ('inv-1', $1)"),
        &[&(new.fence() as i64)],
    )
    .await
    .unwrap();
    new.complete_in_postgres(&tx, outcome.clone())
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let rows: i64 = service
        .query_one(&format!("SELECT count(*) FROM {ledger}"), &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(rows, 1);
    assert!(new.completed_with(&outcome).await.unwrap());
    assert!(!old.completed_with(&outcome).await.unwrap());
    let record = store
        .records()
        .get(new.key())
        .await
        .unwrap()
        .unwrap()
        .record;
    assert_eq!(
        (record.state, record.fence),
        (RecordState::Completed, new.fence())
    );
}

/// A take-over tried while the holder's transaction is open (the holder
/// paused past its lease inside it) waits for the transaction, which holds
/// the record's row lock, and then finds the record completed: it is
/// refused, and the business row exists once, under the first fence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_take_over_during_the_transaction_waits_and_finds_it_completed() {
    let clock = ManualClock::new(1_800_000_000_000);
    let Some(pg) = OnPostgres::open(
        "a_take_over_during_the_transaction_waits",
        "provider-charge",
        on_clock(&clock),
    )
    .await
    else {
        return;
    };
    let (store, engine) = (&pg.store, &pg.engine);
    let (watcher, ledger) = pg.with_ledger().await;
    let (other, table) = (store.clone(), ledger.clone());
    let (sender, taken_over) = tokio::sync::oneshot::channel();
    let mut sender = Some(sender);
    let result = engine
        .run_once_in_postgres(&charge("inv-1"), None, async move |tx, ctx| {
            tx.execute(
                &format!("INSERT INTO {table} VALUES ('inv-1', $1)"),
                &[&(ctx.fence as i64)],
            )
            .await?;
            // Paused past the lease, inside the transaction: another
            // process sees an expired claim and takes it over.
            clock.advance(Duration::from_secs(6 * 60));
            let key = other.records().list(Default::default()).await.unwrap()[0]
                .record
                .key
                .clone();
            let (store, fence) = (other.clone(), ctx.fence);
            let attempt = tokio::spawn(async move {
                store
                    .records()
                    .take_over(
                        &key,
                        fence,
                        Duration::from_secs(300),
                        idem_store_conformance::holder(2),
                        None,
                    )
                    .await
            });
            // Until the take-over waits for this transaction's row lock.
            let mut waited = false;
            for _ in 0..1_000 {
                // Waiting for this transaction's id: a row lock it holds.
                let waiting: i64 = tx
                    .query_one(
                        "SELECT count(*) FROM pg_locks WHERE NOT granted \
                         AND locktype = 'transactionid' \
                         AND transactionid = pg_current_xact_id()::xid",
                        &[],
                    )
                    .await?
                    .get(0);
                if waiting > 0 {
                    waited = true;
                    break;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            if let Some(sender) = sender.take() {
                let _ = sender.send((waited, attempt));
            }
            Ok(Outcome::new(0, "charged"))
        })
        .await
        .unwrap();
    let RunResult::Executed {
        key, fence, result, ..
    } = result
    else {
        panic!("not executed: {result:?}");
    };
    assert!(result.is_ok());
    let (waited, attempt) = taken_over.await.unwrap();
    assert!(waited, "the take-over never waited for the transaction");
    let refused = attempt.await.unwrap();
    assert!(
        matches!(refused, Err(StoreError::NotEligible { .. })),
        "a completed record is not taken over: {refused:?}"
    );
    let record = store.records().get(&key).await.unwrap().unwrap().record;
    assert_eq!(
        (record.state, record.fence),
        (RecordState::Completed, fence)
    );
    let rows: i64 = watcher
        .query_one(&format!("SELECT count(*) FROM {ledger}"), &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(rows, 1);
}
