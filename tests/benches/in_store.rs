//! An effect in the store's own transaction against the same effect in a
//! transaction of its own: the same ledger row per operation, in the same
//! database, measured side by side in one run.
//!
//! - **in the store's transaction**: `Engine::run_once_in_sqlite` /
//!   `run_once_in_postgres`: the claim, then one transaction holding the
//!   ledger row and the completion.
//! - **separate**: `Engine::begin`, then the ledger row in a transaction of
//!   the caller's own (its own connection to the same SQLite file or
//!   PostgreSQL database), then `Execution::complete`: one commit more per
//!   operation, and a crash between the two leaves a charge whose record
//!   says nothing of it.
//!
//! With 1 and 8 concurrent callers, rounds alternating, medians. PostgreSQL
//! with `IDEM_TEST_POSTGRES_URL`.
//!
//! `cargo bench -p idem-tests --bench in_store [-- OPERATIONS]` (default
//! 2,000 per measurement).

use std::sync::Arc;
use std::time::{Duration, Instant};

use idem::core::{Operation, OperationLimits};
use idem::engine::{Begin, Engine, EngineOptions, RunResult};
use idem::store::{Database, Outcome, StoreOptions};
use idem_tests::load;

const ROUNDS: usize = 3;

/// A fresh charge: every operation claims a new key.
fn op(n: u64) -> Operation {
    let json = format!(
        r#"{{"kind":"charge","tenant":"acme","fields":{{"customer":"c{}","billing_period":"2026-11","invoice_id":"i{n}","amount":"100","currency":"EUR"}}}}"#,
        n % 1000
    );
    Operation::from_json(&json, &OperationLimits::default()).unwrap()
}

#[derive(Clone, Copy, PartialEq)]
enum Way {
    InStore,
    Separate,
}

/// Where the ledger lives, and how the separate way reaches it.
enum Ledger {
    /// The SQLite store's file.
    Sqlite(std::path::PathBuf),
    /// The PostgreSQL server's URL and the table's qualified name.
    Postgres(String, String),
}

fn outcome(n: u64) -> Outcome {
    Outcome::new(0, format!("ledger row of i{n}"))
}

/// Operations per second: `callers` tasks running `per_caller` fresh
/// operations each, `way`, against `engine` (whose store holds the ledger).
async fn rate(engine: Arc<Engine>, ledger: Arc<Ledger>, way: Way, callers: u64, per: u64) -> f64 {
    let base = next_base(callers * per);
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for c in 0..callers {
        let (engine, ledger) = (engine.clone(), ledger.clone());
        tasks.spawn(async move {
            let mut separate = match (&*ledger, way) {
                (Ledger::Sqlite(path), Way::Separate) => Some(Conn::sqlite(path)),
                (Ledger::Postgres(url, _), Way::Separate) => Some(Conn::postgres(url).await),
                _ => None,
            };
            for i in 0..per {
                let n = base + c * per + i;
                one(&engine, &ledger, separate.as_mut(), n).await;
            }
        });
    }
    while let Some(joined) = tasks.join_next().await {
        joined.unwrap();
    }
    (callers * per) as f64 / start.elapsed().as_secs_f64()
}

/// Fresh operation numbers for the next measurement.
fn next_base(count: u64) -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(count, Ordering::Relaxed)
}

/// A caller's own connection to the ledger's database.
enum Conn {
    Sqlite(Arc<std::sync::Mutex<rusqlite::Connection>>),
    Postgres(tokio_postgres::Client),
}

impl Conn {
    fn sqlite(path: &std::path::Path) -> Conn {
        let c = rusqlite::Connection::open(path).unwrap();
        c.busy_timeout(Duration::from_secs(60)).unwrap();
        // The store's own durability: a commit is on disk.
        c.pragma_update(None, "synchronous", "FULL").unwrap();
        Conn::Sqlite(Arc::new(std::sync::Mutex::new(c)))
    }

    async fn postgres(url: &str) -> Conn {
        let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(conn);
        Conn::Postgres(client)
    }
}

/// One operation, `separate` or (without a connection) in the store's
/// transaction; every one must execute.
async fn one(engine: &Engine, ledger: &Ledger, separate: Option<&mut Conn>, n: u64) {
    let op = op(n);
    let Some(conn) = separate else {
        let result = match ledger {
            Ledger::Sqlite(_) => engine
                .run_once_in_sqlite(&op, move |tx, ctx| {
                    tx.prepare_cached(
                        "INSERT INTO ledger (invoice, amount, fence) VALUES (?1, '100', ?2)",
                    )?
                    .execute(rusqlite::params![format!("i{n}"), ctx.fence as i64])?;
                    Ok(outcome(n))
                })
                .await
                .unwrap(),
            Ledger::Postgres(_, table) => {
                let insert =
                    format!("INSERT INTO {table} (invoice, amount, fence) VALUES ($1, '100', $2)");
                engine
                    .run_once_in_postgres(&op, None, async move |tx, ctx| {
                        tx.execute(&insert, &[&format!("i{n}"), &(ctx.fence as i64)])
                            .await?;
                        Ok(outcome(n))
                    })
                    .await
                    .unwrap()
            }
        };
        assert!(
            matches!(result, RunResult::Executed { result: Ok(_), .. }),
            "{result:?}"
        );
        return;
    };
    let Begin::Execute(execution) = engine.begin(&op).await.unwrap() else {
        panic!("a fresh operation executes");
    };
    let fence = execution.fence() as i64;
    match (conn, ledger) {
        (Conn::Sqlite(c), _) => {
            let c = c.clone();
            tokio::task::spawn_blocking(move || {
                let mut c = c.lock().unwrap();
                let tx = c
                    .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
                    .unwrap();
                tx.prepare_cached(
                    "INSERT INTO ledger (invoice, amount, fence) VALUES (?1, '100', ?2)",
                )
                .unwrap()
                .execute(rusqlite::params![format!("i{n}"), fence])
                .unwrap();
                tx.commit().unwrap();
            })
            .await
            .unwrap();
        }
        (Conn::Postgres(client), Ledger::Postgres(_, table)) => {
            let tx = client.transaction().await.unwrap();
            tx.execute(
                &format!("INSERT INTO {table} (invoice, amount, fence) VALUES ($1, '100', $2)"),
                &[&format!("i{n}"), &fence],
            )
            .await
            .unwrap();
            tx.commit().await.unwrap();
        }
        _ => unreachable!("a connection to the ledger's own database"),
    }
    execution.complete(outcome(n)).await.unwrap();
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Both ways on one store, rounds alternating; prints a line per caller
/// count.
fn compare(rt: &tokio::runtime::Runtime, engine: Arc<Engine>, ledger: Arc<Ledger>, total: u64) {
    println!(
        "{:>8} {:>14} {:>14} {:>8}",
        "callers", "in store op/s", "separate op/s", "ratio"
    );
    for callers in [1u64, 8] {
        let per = (total / callers).max(1);
        let (mut a, mut b) = (Vec::new(), Vec::new());
        for _ in 0..ROUNDS {
            a.push(rt.block_on(rate(
                engine.clone(),
                ledger.clone(),
                Way::InStore,
                callers,
                per,
            )));
            b.push(rt.block_on(rate(
                engine.clone(),
                ledger.clone(),
                Way::Separate,
                callers,
                per,
            )));
        }
        let (a, b) = (median(a), median(b));
        println!("{callers:>8} {a:>14.0} {b:>14.0} {:>7.2}x", a / b);
    }
}

fn main() {
    let total: u64 = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .and_then(|a| a.parse().ok())
        .unwrap_or(2_000);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idem.db");
    let url = format!("sqlite:{}", path.display());
    let engine = rt.block_on(async {
        let store = idem::store::open(&url, StoreOptions::default())
            .await
            .unwrap();
        let Database::Sqlite(_) = store.database().await.unwrap() else {
            panic!("a SQLite store");
        };
        Arc::new(Engine::new(
            load("billing-charge"),
            store,
            EngineOptions::default(),
        ))
    });
    {
        let c = rusqlite::Connection::open(&path).unwrap();
        c.execute_batch(
            "CREATE TABLE ledger (invoice TEXT NOT NULL, amount TEXT NOT NULL, fence INTEGER NOT NULL)",
        )
        .unwrap();
    }
    println!(
        "an effect in the store's transaction / begin + its own transaction + complete: SQLite, {total} fresh operations, medians of {ROUNDS} rounds"
    );
    compare(&rt, engine, Arc::new(Ledger::Sqlite(path.clone())), total);

    let Ok(pg) = std::env::var("IDEM_TEST_POSTGRES_URL") else {
        println!("PostgreSQL: skipped (set IDEM_TEST_POSTGRES_URL to measure it)");
        return;
    };
    let schema = idem_store_conformance::fresh_schema();
    let sep = if pg.contains('?') { '&' } else { '?' };
    let store_url = format!("{pg}{sep}idem_schema={schema}&idem_pool_size=16&sslmode=disable");
    let table = format!("{schema}.ledger");
    let engine = rt.block_on(async {
        let store = idem::store::open(&store_url, StoreOptions::default())
            .await
            .unwrap();
        let Conn::Postgres(client) = Conn::postgres(&pg).await else {
            unreachable!()
        };
        client
            .batch_execute(&format!(
                "CREATE TABLE {table} (invoice TEXT NOT NULL, amount TEXT NOT NULL, fence BIGINT NOT NULL)"
            ))
            .await
            .unwrap();
        Arc::new(Engine::new(load("billing-charge"), store, EngineOptions::default()))
    });
    println!("\nthe same on PostgreSQL");
    compare(
        &rt,
        engine,
        Arc::new(Ledger::Postgres(pg.clone(), table)),
        total,
    );
    idem_store_conformance::drop_postgres_schema(&store_url);
}
