//! What batching the store calls of `idem run` gains: the engine beginning
//! and completing operations one per store call, against `Engine::claim_batch`
//! and `Engine::finish_batch` (one call for a batch's claims, one for its
//! completions), same store, same operations, same run, as `idem run
//! --concurrency 32` does with `--claim-batch 1 --finish-batch 1` and with
//! batches of 32.
//!
//! Two shapes: a fresh run (every key new: claim, then complete) and a
//! re-run (every key completed: each begin is a replay, no effect). On
//! SQLite (WAL, synchronous=FULL) and, with `IDEM_TEST_POSTGRES_URL`, on
//! PostgreSQL. Prints ops/s and the batched / single ratio (median of 3).
//!
//! `cargo bench -p idem-tests --bench batch`

use std::sync::Arc;
use std::time::Instant;

use idem::core::{KeyedDerivation, Operation, OperationLimits};
use idem::engine::{Begin, Engine, EngineOptions};
use idem::store::{Ending, Outcome, Store, StoreOptions};
use idem_tests::load;

const CONCURRENCY: usize = 32;
const OPS: usize = 2_048;

fn op(run: usize, n: usize) -> Operation {
    let json = format!(
        r#"{{"kind":"charge","tenant":"bench-{run}","fields":{{"customer":"c{n}","billing_period":"2026-11","invoice_id":"i{n}","amount":"100","currency":"EUR"}}}}"#
    );
    Operation::from_json(&json, &OperationLimits::default()).unwrap()
}

async fn settle(begun: Begin) {
    match begun {
        Begin::Execute(e) => e
            .complete(Outcome::new(0, b"receipt".to_vec()))
            .await
            .unwrap(),
        Begin::Replay(_) => {}
        other => panic!("unexpected {other:?}"),
    }
}

/// `CONCURRENCY` tasks, each beginning (and settling) its share one claim
/// at a time: `--claim-batch 1`.
async fn single(engine: Arc<Engine>, items: Vec<(Operation, KeyedDerivation)>) -> f64 {
    let start = Instant::now();
    let n = items.len();
    let mut shares: Vec<Vec<_>> = (0..CONCURRENCY).map(|_| Vec::new()).collect();
    for (i, item) in items.into_iter().enumerate() {
        shares[i % CONCURRENCY].push(item);
    }
    let mut tasks = tokio::task::JoinSet::new();
    for share in shares {
        let engine = engine.clone();
        tasks.spawn(async move {
            for (op, keyed) in share {
                let begun = engine.begin_derived(&op, keyed).await.unwrap();
                settle(begun).await;
            }
        });
    }
    while let Some(r) = tasks.join_next().await {
        r.unwrap();
    }
    n as f64 / start.elapsed().as_secs_f64()
}

/// Batches of `CONCURRENCY` claimed in one store call, settled concurrently,
/// and their completions recorded in one store call: batches of 32.
async fn batched(engine: Arc<Engine>, items: Vec<(Operation, KeyedDerivation)>) -> f64 {
    let start = Instant::now();
    let n = items.len();
    let mut items = items.into_iter().peekable();
    while items.peek().is_some() {
        let batch: Vec<_> = items.by_ref().take(CONCURRENCY).collect();
        let claimed = engine.claim_batch(batch).await.unwrap();
        let mut tasks = tokio::task::JoinSet::new();
        for c in claimed {
            let engine = engine.clone();
            tasks.spawn(async move {
                match engine.begin_claimed(c).await.unwrap() {
                    Begin::Execute(e) => Some(e),
                    Begin::Replay(_) => None,
                    other => panic!("unexpected {other:?}"),
                }
            });
        }
        let mut ended = Vec::new();
        while let Some(r) = tasks.join_next().await {
            if let Some(e) = r.unwrap() {
                ended.push((e, Ending::Completed, Outcome::new(0, b"receipt".to_vec())));
            }
        }
        if !ended.is_empty() {
            for r in engine.finish_batch(ended).await.unwrap() {
                r.unwrap();
            }
        }
    }
    n as f64 / start.elapsed().as_secs_f64()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// Runs both shapes both ways on `store`; prints a table row per shape.
fn measure(name: &str, store: Store, rt: &tokio::runtime::Runtime) {
    let engine = Arc::new(Engine::new(
        load("billing-charge"),
        store,
        EngineOptions::default(),
    ));
    let mut rates = [[Vec::new(), Vec::new()], [Vec::new(), Vec::new()]];
    for round in 0..3 {
        for (way, batch) in [false, true].into_iter().enumerate() {
            // A tenant per round and way: fresh keys for the fresh run.
            let run = round * 2 + way;
            let items: Vec<_> = (0..OPS)
                .map(|n| {
                    let op = op(run, n);
                    let keyed = engine.derive(&op).unwrap();
                    (op, keyed)
                })
                .collect();
            // First on fresh keys, then the same again: all replays.
            for shape_rates in rates.iter_mut() {
                let rate = rt.block_on(async {
                    if batch {
                        batched(engine.clone(), items.clone()).await
                    } else {
                        single(engine.clone(), items.clone()).await
                    }
                });
                shape_rates[way].push(rate);
            }
        }
    }
    for (shape, label) in ["fresh run (claim + complete)", "re-run (all replays)"]
        .iter()
        .enumerate()
    {
        let (one, many) = (
            median(rates[shape][0].clone()),
            median(rates[shape][1].clone()),
        );
        println!(
            "| {name} | {label} | {one:.0} | {many:.0} | {:.2}× |",
            many / one
        );
    }
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    println!("{OPS} operations, {CONCURRENCY} at a time; ops/s, median of 3 rounds\n");
    println!("| store | shape | one per call (ops/s) | {CONCURRENCY} per call (ops/s) | gain |");
    println!("|---|---|---|---|---|");
    let dir = tempfile::tempdir().unwrap();
    let sqlite = rt
        .block_on(idem::store::open(
            &format!("sqlite:{}", dir.path().join("idem.db").display()),
            StoreOptions::default(),
        ))
        .unwrap();
    measure("SQLite", sqlite, &rt);
    match std::env::var("IDEM_TEST_POSTGRES_URL") {
        Ok(url) if !url.is_empty() => {
            let schema = format!("idem_bench_batch_{}", std::process::id());
            let sep = if url.contains('?') { '&' } else { '?' };
            let store = rt
                .block_on(idem::store::open(
                    &format!("{url}{sep}idem_schema={schema}&idem_pool_size={CONCURRENCY}"),
                    StoreOptions::default(),
                ))
                .unwrap();
            measure("PostgreSQL", store, &rt);
            rt.block_on(async {
                let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                    .await
                    .unwrap();
                tokio::spawn(conn);
                client
                    .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
                    .await
                    .unwrap();
            });
        }
        _ => println!("\n(PostgreSQL skipped: set IDEM_TEST_POSTGRES_URL)"),
    }
}
