//! Effects in the store's own transaction (`Engine::run_once_in_sqlite`,
//! `Engine::run_once_in_postgres`, `Execution::complete_in_postgres`),
//! against real SQLite files and a real PostgreSQL: a refusal before
//! anything is claimed, a serialization failure run again and never
//! recorded, a lost COMMIT answer read back, a deposed holder's
//! caller-owned transaction committing nothing, and a holder killed
//! (SIGKILL) between its business write and its completion, many times.

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use idem::core::{Operation, OperationLimits};
use idem::engine::{Begin, Engine, EngineError, EngineOptions, ExecContext, RunResult};
use idem::store::{
    AttemptEvent, AttemptFilter, ManualClock, MemoryStore, Outcome, RecordState, Store, StoreClock,
    StoreError, StoreOptions, tokio_postgres,
};
use idem_store_conformance::{drop_postgres_schema, fresh_schema};
use idem_tests::cut_proxy::CutProxy;
use idem_tests::pg_cluster::PgCluster;
use idem_tests::{load, policy_path, postgres_url};

/// The charge of `invoice` (policies `provider-charge`, `billing-charge`).
fn charge(invoice: &str) -> Operation {
    Operation::from_json(
        &format!(
            r#"{{"kind":"charge","tenant":"acme","fields":{{"customer":"c1","billing_period":"2026-11","invoice_id":"{invoice}","amount":"100","currency":"EUR"}}}}"#
        ),
        &OperationLimits::default(),
    )
    .unwrap()
}

/// `url` with a schema of its own.
fn schema_url(url: &str, schema: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}idem_schema={schema}&idem_pool_size=4")
}

/// A client of its own, as a service beside idem holds one.
async fn connect(url: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    client
}

/// The events the attempt log holds for `op`'s key.
async fn events(store: &Store, key: &idem::store::RecordKey) -> Vec<AttemptEvent> {
    let filter = AttemptFilter {
        key: Some(key.clone()),
        ..AttemptFilter::default()
    };
    let entries = store.records().attempts(filter).await.unwrap();
    entries.into_iter().map(|e| e.event).collect()
}

#[tokio::test]
async fn the_memory_store_refuses_an_effect_in_its_transaction_before_claiming() {
    let store: Store = MemoryStore::new(StoreOptions::default()).into();
    let engine = Engine::new(
        load("provider-charge"),
        store.clone(),
        EngineOptions::default(),
    );
    let ran = Arc::new(AtomicU32::new(0));
    let counted = ran.clone();
    let refused = engine
        .run_once_in_sqlite(&charge("inv-1"), move |_, _| {
            counted.fetch_add(1, Ordering::SeqCst);
            Ok(Outcome::new(0, "charged"))
        })
        .await;
    match refused {
        Err(EngineError::Store(StoreError::NotTransactional { why, .. })) => {
            assert!(why.contains("SQLite or PostgreSQL"), "{why}")
        }
        other => panic!("expected NotTransactional, got {other:?}"),
    }
    let refused = engine
        .run_once_in_postgres(&charge("inv-1"), None, async |_, _| {
            Ok(Outcome::new(0, "charged"))
        })
        .await;
    assert!(
        matches!(
            refused,
            Err(EngineError::Store(StoreError::NotTransactional { .. }))
        ),
        "{refused:?}"
    );
    assert_eq!(ran.load(Ordering::SeqCst), 0, "the effect ran");
    let records = store.records().list(Default::default()).await.unwrap();
    assert!(records.is_empty(), "a refusal claimed: {records:?}");
}

/// A SERIALIZABLE effect whose business row another client changed after
/// the transaction's snapshot fails with SQLSTATE 40001 (for real: no
/// injection); the whole transaction runs again, the effect included, and
/// only the second run's write commits. The attempt log holds no failure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_serialization_failure_runs_the_whole_transaction_again_and_is_never_recorded() {
    let Some(url) = postgres_url("a_serialization_failure_runs_the_whole_transaction_again") else {
        return;
    };
    let schema = fresh_schema();
    let store_url = schema_url(&url, &schema);
    let store = idem::store::open(&store_url, StoreOptions::default())
        .await
        .unwrap();
    let engine = Engine::new(
        load("provider-charge"),
        store.clone(),
        EngineOptions::default(),
    );
    let other = connect(&url).await;
    let accounts = format!("{schema}.accounts");
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
        events(&store, &key).await,
        [AttemptEvent::Executed, AttemptEvent::Completed],
        "a serialization failure is never recorded"
    );
    drop_postgres_schema(&store_url);
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
    let Some(url) = postgres_url("a_deposed_holders_own_transaction_commits_nothing") else {
        return;
    };
    let schema = fresh_schema();
    let store_url = schema_url(&url, &schema);
    let clock = ManualClock::new(1_800_000_000_000);
    let options = StoreOptions {
        clock: clock.store_clock(),
        ..StoreOptions::default()
    };
    let store = idem::store::open(&store_url, options).await.unwrap();
    let engine = Engine::new(
        load("provider-charge"),
        store.clone(),
        EngineOptions::default(),
    );
    let ledger = format!("{schema}.ledger");
    let mut service = connect(&url).await;
    service
        .batch_execute(&format!(
            "CREATE TABLE {ledger} (invoice text, fence bigint)"
        ))
        .await
        .unwrap();
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
    drop_postgres_schema(&store_url);
}

/// Operations each crash run charges, and how many times the holder is
/// killed.
const OPERATIONS: u32 = 12;
const KILLS: u64 = 20;

/// A small deterministic sequence (a linear congruential generator): where
/// each kill lands varies from run to run of the loop, and is the same in
/// every run of the test.
fn pseudo_random(seed: u64) -> u64 {
    seed.wrapping_mul(6_364_136_223_846_793_005)
        .wrapping_add(1_442_695_040_888_963_407)
        >> 33
}

/// Runs the `effect_in_store` example against `url` and kills it (SIGKILL)
/// once it has reported `after` operations and `delay` more has passed:
/// with a pause inside each transaction after the business write, most
/// kills land between a business write and its completion.
fn run_and_kill(url: &str, cache: &std::path::Path, after: u64, delay: Duration) {
    use std::io::BufRead;
    let mut child: Child = Command::new(crate::examples::example_bin("effect_in_store"))
        .arg(policy_path("provider-charge"))
        .arg(url)
        .arg(OPERATIONS.to_string())
        .env("IDEM_EXAMPLE_PAUSE_MS", "15")
        .env("IDEM_CACHE_DIR", cache)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut lines = std::io::BufReader::new(stdout).lines();
    for _ in 0..after {
        if lines.next().is_none() {
            break;
        }
    }
    std::thread::sleep(delay);
    // `Child::kill` is SIGKILL on Unix: no destructor, no rollback by the
    // process itself; the database rolls the open transaction back.
    let _ = child.kill();
    let _ = child.wait();
}

/// Kills the holder many times, then runs every operation again once the
/// leases are over (a store clock ten minutes ahead): every invoice's
/// business row exists exactly once, every record is completed (none in
/// review, none in progress).
async fn killed_holders_leave_every_row_once(url: &str, rows: impl AsyncFn(&str) -> i64) {
    let cache = tempfile::tempdir().unwrap();
    for kill in 0..KILLS {
        let random = pseudo_random(kill + 1);
        let after = random % u64::from(OPERATIONS);
        // Up to about two operations' time: a kill lands in the claim, in
        // the pause after the business write, or in the completion.
        let delay = Duration::from_millis(random % 40);
        let url = url.to_string();
        let cache = cache.path().to_path_buf();
        tokio::task::spawn_blocking(move || run_and_kill(&url, &cache, after, delay))
            .await
            .unwrap();
    }
    // The kills landed mid-operation (else this test could not fail):
    // claims whose holder died are left in progress, their leases live.
    let now = idem::store::open(url, StoreOptions::default())
        .await
        .unwrap();
    let held = now.records().list(Default::default()).await.unwrap();
    let in_progress = held
        .iter()
        .filter(|v| v.record.state == RecordState::InProgress)
        .count();
    assert!(in_progress > 0, "no kill landed inside an operation");
    drop(now);
    let later = StoreOptions {
        clock: StoreClock::system_with_offset(10 * 60 * 1000),
        ..StoreOptions::default()
    };
    let store = idem::store::open(url, later).await.unwrap();
    let database = store.database().await.unwrap();
    let engine = Engine::new(
        load("provider-charge"),
        store.clone(),
        EngineOptions::default(),
    );
    for n in 1..=OPERATIONS {
        let invoice = format!("inv-{n}");
        let op = charge(&invoice);
        let result = match &database {
            idem::store::Database::Sqlite(_) => {
                let invoice = invoice.clone();
                engine
                    .run_once_in_sqlite(&op, move |tx, ctx: &ExecContext| {
                        tx.execute(
                            "CREATE TABLE IF NOT EXISTS ledger (invoice TEXT NOT NULL, amount TEXT NOT NULL, fence INTEGER NOT NULL)",
                            [],
                        )?;
                        tx.execute(
                            "INSERT INTO ledger (invoice, amount, fence) VALUES (?1, '100', ?2)",
                            idem::store::rusqlite::params![invoice, ctx.fence as i64],
                        )?;
                        Ok(Outcome::new(0, format!("ledger row of {invoice}")))
                    })
                    .await
            }
            idem::store::Database::Postgres(postgres) => {
                let table = format!("{}.ledger", postgres.schema());
                engine
                    .run_once_in_postgres(&op, None, async |tx, ctx| {
                        tx.batch_execute(&format!(
                            "CREATE TABLE IF NOT EXISTS {table} (invoice TEXT NOT NULL, amount TEXT NOT NULL, fence BIGINT NOT NULL)"
                        ))
                        .await?;
                        tx.execute(
                            &format!("INSERT INTO {table} (invoice, amount, fence) VALUES ($1, '100', $2)"),
                            &[&invoice, &(ctx.fence as i64)],
                        )
                        .await?;
                        Ok(Outcome::new(0, format!("ledger row of {invoice}")))
                    })
                    .await
            }
            _ => unreachable!("a SQLite or PostgreSQL store"),
        };
        match result.unwrap() {
            RunResult::Executed { result: Ok(_), .. } | RunResult::NotRun(Begin::Replay(_)) => {}
            other => panic!("{invoice}: {other:?}"),
        }
    }
    for n in 1..=OPERATIONS {
        let invoice = format!("inv-{n}");
        assert_eq!(rows(&invoice).await, 1, "{invoice}'s business row");
    }
    let records = store.records().list(Default::default()).await.unwrap();
    assert_eq!(records.len(), OPERATIONS as usize);
    for view in &records {
        assert_eq!(view.record.state, RecordState::Completed, "{view:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_killed_between_its_business_write_and_its_completion_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idem.db");
    let url = format!("sqlite:{}", path.display());
    killed_holders_leave_every_row_once(&url, async |invoice: &str| {
        let db = idem::store::rusqlite::Connection::open(&path).unwrap();
        db.query_row(
            "SELECT count(*) FROM ledger WHERE invoice = ?1",
            [invoice],
            |row| row.get(0),
        )
        .unwrap()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_killed_between_its_business_write_and_its_completion_postgres() {
    let Some(url) = postgres_url("a_holder_killed_between_its_business_write_and_its_completion")
    else {
        return;
    };
    let schema = fresh_schema();
    let store_url = schema_url(&url, &schema);
    let client = connect(&url).await;
    let sql = format!("SELECT count(*) FROM {schema}.ledger WHERE invoice = $1");
    killed_holders_leave_every_row_once(&store_url, async |invoice: &str| {
        client.query_one(&sql, &[&invoice]).await.unwrap().get(0)
    })
    .await;
    drop_postgres_schema(&store_url);
}

/// The effect's own failure rolls its row back and is recorded under the
/// fence: retryable, the next run re-executes it (`provider-charge`) and
/// its row is the only one; permanent, it is replayed and never run again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_effects_failure_rolls_its_writes_back_and_is_recorded_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idem.db");
    let store = idem::store::open(
        &format!("sqlite:{}", path.display()),
        StoreOptions::default(),
    )
    .await
    .unwrap();
    let engine = Engine::new(
        load("provider-charge"),
        store.clone(),
        EngineOptions::default(),
    );
    let effect = |fail: Option<bool>| {
        move |tx: &idem::store::rusqlite::Transaction<'_>, ctx: &ExecContext| {
            tx.execute(
                "CREATE TABLE IF NOT EXISTS ledger (fence INTEGER NOT NULL)",
                [],
            )?;
            tx.execute("INSERT INTO ledger VALUES (?1)", [ctx.fence as i64])?;
            match fail {
                Some(true) => Err(idem::store::EffectError::retryable(Outcome::error(
                    2, "declined",
                ))),
                Some(false) => Err(idem::store::EffectError::permanent(Outcome::error(
                    3,
                    "card blocked",
                ))),
                None => Ok(Outcome::new(0, "charged")),
            }
        }
    };
    let rows = || {
        let db = idem::store::rusqlite::Connection::open(&path).unwrap();
        db.query_row("SELECT count(*) FROM ledger", [], |row| {
            row.get::<_, i64>(0)
        })
        .unwrap()
    };

    let op = charge("inv-1");
    let first = engine
        .run_once_in_sqlite(&op, effect(Some(true)))
        .await
        .unwrap();
    let RunResult::Executed {
        key,
        result: Err(failed),
        ..
    } = first
    else {
        panic!("{first:?}");
    };
    assert!(failed.retryable);
    let record = store.records().get(&key).await.unwrap().unwrap().record;
    assert_eq!(record.state, RecordState::FailedRetryable);
    let second = engine.run_once_in_sqlite(&op, effect(None)).await.unwrap();
    let RunResult::Executed {
        fence,
        result: Ok(_),
        ..
    } = second
    else {
        panic!("a retryable failure is re-executed: {second:?}");
    };
    assert!(fence > record.fence);
    assert_eq!(rows(), 1, "only the successful run's row");
    assert_eq!(
        events(&store, &key).await,
        [
            AttemptEvent::Executed,
            AttemptEvent::FailedRetryable,
            AttemptEvent::TakenOver,
            AttemptEvent::Completed
        ]
    );

    let op = charge("inv-2");
    let first = engine
        .run_once_in_sqlite(&op, effect(Some(false)))
        .await
        .unwrap();
    assert!(
        matches!(&first, RunResult::Executed { result: Err(f), .. } if !f.retryable),
        "{first:?}"
    );
    let again = engine.run_once_in_sqlite(&op, effect(None)).await.unwrap();
    assert!(
        matches!(again, RunResult::NotRun(Begin::Replay(_))),
        "a permanent failure is replayed: {again:?}"
    );
    assert_eq!(rows(), 1, "the failed runs wrote nothing");
}

/// A take-over tried while the holder's transaction is open (the holder
/// paused past its lease inside it) waits for the transaction, which holds
/// the record's row lock, and then finds the record completed: it is
/// refused, and the business row exists once, under the first fence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_take_over_during_the_transaction_waits_and_finds_it_completed() {
    let Some(url) = postgres_url("a_take_over_during_the_transaction_waits") else {
        return;
    };
    let schema = fresh_schema();
    let store_url = schema_url(&url, &schema);
    let clock = ManualClock::new(1_800_000_000_000);
    let options = StoreOptions {
        clock: clock.store_clock(),
        ..StoreOptions::default()
    };
    let store = idem::store::open(&store_url, options).await.unwrap();
    let engine = Engine::new(
        load("provider-charge"),
        store.clone(),
        EngineOptions::default(),
    );
    let watcher = Arc::new(connect(&url).await);
    let ledger = format!("{schema}.ledger");
    watcher
        .batch_execute(&format!(
            "CREATE TABLE {ledger} (invoice text, fence bigint)"
        ))
        .await
        .unwrap();
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
    drop_postgres_schema(&store_url);
}
