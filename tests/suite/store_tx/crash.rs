//! A holder killed (SIGKILL) between its business write and its
//! completion, many times, on SQLite and PostgreSQL: a real process (the
//! `effect_in_store` example), a real database. The policy is
//! `billing-charge`, whose standard answer to an expired claim is to send
//! it to review: only the record's word that its effect commits with its
//! end makes the duplicate re-execute instead.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use idem::engine::{Begin, Engine, EngineOptions, ExecContext, RunResult};
use idem::store::{
    AttemptEvent, AttemptFilter, EXPIRED_WITHOUT_EFFECT, Outcome, RecordState, StoreClock,
    StoreOptions,
};
use idem_store_conformance::{drop_postgres_schema, fresh_schema};
use idem_tests::{load, policy_path, postgres_url};

use super::{charge, connect, schema_url};

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
        .arg(policy_path("billing-charge"))
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
/// review, none in progress), and each claim a kill left behind was
/// re-executed, logged as having done nothing.
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
        load("billing-charge"),
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
    assert!(
        idem::forensics::review::waiting_records(&store, None)
            .await
            .unwrap()
            .is_empty(),
        "nothing waits for review"
    );
    // Every claim a kill left in progress was taken over as one that did
    // nothing (else the second pass could not have completed it under this
    // policy); the log says so.
    let entries = store
        .records()
        .attempts(AttemptFilter::default())
        .await
        .unwrap();
    let re_executed = entries
        .iter()
        .filter(|e| {
            e.event == AttemptEvent::TakenOver
                && e.detail.as_deref() == Some(EXPIRED_WITHOUT_EFFECT)
        })
        .count();
    assert_eq!(re_executed, in_progress, "{entries:#?}");
    assert!(
        entries
            .iter()
            .all(|e| e.event != AttemptEvent::MarkedUnknown),
        "nothing was sent to review"
    );
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
