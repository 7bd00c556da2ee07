//! Requests per second through `idem serve` (the sidecar's router on a
//! real TCP socket, a keep-alive HTTP/1.1 client per caller), with 1 and
//! 32 concurrent callers, on SQLite and PostgreSQL, side by side in one
//! run; beside each, the same begin+complete through the engine in
//! process, so the ratio is the sidecar's cost (HTTP, JSON, one more hop).
//! One operation is two requests: begin (a fresh key: execute), then
//! complete under its fence.
//!
//! Rounds are interleaved (every configuration once per round, three
//! rounds) and the median is reported: on a shared machine only figures
//! from one run compare.
//!
//! `cargo bench -p idem-serve --bench serve` (PostgreSQL with
//! `IDEM_TEST_POSTGRES_URL`; `IDEM_BENCH_OPS=N` operations per
//! configuration and round, default 640).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use idem::core::{Operation, OperationLimits};
use idem::engine::{Begin, Engine, EngineOptions};
use idem::store::{Outcome, StoreOptions};
use idem_serve::{Sidecar, SidecarOptions};
use serde_json::{Value, json};

static NEXT: AtomicU64 = AtomicU64::new(0);

/// A charge no one asked for before.
fn fresh_op() -> Value {
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    json!({"kind": "charge", "tenant": "bench", "fields": {
        "customer": format!("c{}", n % 97), "billing_period": "2026-11",
        "invoice_id": format!("{}-{n}", std::process::id()), "amount": "100", "currency": "EUR"}})
}

type HttpClient = Client<HttpConnector, Full<Bytes>>;

async fn post(client: &HttpClient, url: &str, body: &Value) -> Value {
    let request = http::Request::post(url)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap();
    let response = client.request(request).await.expect("the sidecar answers");
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    assert!(status.is_success(), "{url}: {status} {bytes:?}");
    serde_json::from_slice(&bytes).unwrap()
}

/// `ops` operations through the sidecar at `base`, by `callers` callers at
/// once; operations per second.
async fn through_sidecar(base: &str, callers: usize, ops: usize) -> f64 {
    let per = ops / callers;
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..callers {
        let base = base.to_string();
        tasks.push(tokio::spawn(async move {
            // One keep-alive connection per caller, as a service's client
            // pool would hold.
            let client: HttpClient = Client::builder(TokioExecutor::new()).build_http();
            for _ in 0..per {
                let begun = post(
                    &client,
                    &format!("{base}/v1/begin"),
                    &json!({"operation": fresh_op()}),
                )
                .await;
                assert_eq!(begun["answer"], "execute");
                let done = json!({"key": begun["key"], "fence": begun["fence"], "body": "receipt"});
                post(&client, &format!("{base}/v1/complete"), &done).await;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    (per * callers) as f64 / start.elapsed().as_secs_f64()
}

/// The same operations through the engine in process.
async fn in_process(engine: &Engine, callers: usize, ops: usize) -> f64 {
    let per = ops / callers;
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..callers {
        let engine = engine.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..per {
                let op = Operation::from_value(fresh_op(), &OperationLimits::default()).unwrap();
                let Begin::Execute(execution) = engine.begin(&op).await.unwrap() else {
                    panic!("a fresh key executes");
                };
                execution
                    .complete(Outcome::new(0, &b"receipt"[..]))
                    .await
                    .unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    (per * callers) as f64 / start.elapsed().as_secs_f64()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    // `cargo bench` passes --bench; a filter, if any, is ignored.
    let ops: usize = std::env::var("IDEM_BENCH_OPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(640);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut stores = vec![(
        "SQLite".to_string(),
        format!("sqlite:{}", dir.path().join("idem.db").display()),
    )];
    if let Ok(url) = std::env::var("IDEM_TEST_POSTGRES_URL") {
        let schema = idem_store_conformance::fresh_schema();
        let sep = if url.contains('?') { '&' } else { '?' };
        stores.push((
            "PostgreSQL".into(),
            format!("{url}{sep}idem_schema={schema}"),
        ));
    } else {
        eprintln!("PostgreSQL: SKIPPED (set IDEM_TEST_POSTGRES_URL)");
    }
    let setups: Vec<(String, Engine, String)> = runtime.block_on(async {
        let mut out = Vec::new();
        for (name, url) in &stores {
            let store = idem::store::open(url, StoreOptions::default())
                .await
                .unwrap();
            let engine = Engine::new(
                idem_tests::load("billing-charge"),
                store,
                EngineOptions::default(),
            );
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let base = format!("http://{}", listener.local_addr().unwrap());
            let sidecar = Sidecar::new(engine.clone(), SidecarOptions::default());
            tokio::spawn(async move { sidecar.run(listener, std::future::pending()).await });
            out.push((name.clone(), engine, base));
        }
        out
    });
    let callers = [1usize, 32];
    let rounds = 3;
    // results[store][callers] = (sidecar ops/s, in-process ops/s) per round
    let mut results = vec![vec![(Vec::new(), Vec::new()); callers.len()]; setups.len()];
    runtime.block_on(async {
        // Warm up: connections, the store's first pages, the policy pool.
        for (_, engine, base) in &setups {
            through_sidecar(base, 4, 64).await;
            in_process(engine, 4, 64).await;
        }
        for _round in 0..rounds {
            for (s, (_, engine, base)) in setups.iter().enumerate() {
                for (c, &n) in callers.iter().enumerate() {
                    results[s][c].0.push(through_sidecar(base, n, ops).await);
                    results[s][c].1.push(in_process(engine, n, ops).await);
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
    println!();
    println!(
        "idem serve: begin+complete per second (2 requests each), median of {rounds} interleaved rounds of {ops} operations"
    );
    println!(
        "{:<11} {:>7} {:>14} {:>12} {:>16} {:>8}",
        "store", "callers", "sidecar ops/s", "requests/s", "in-process ops/s", "ratio"
    );
    for (s, (name, _, _)) in setups.iter().enumerate() {
        for (c, &n) in callers.iter().enumerate() {
            let sidecar = median(results[s][c].0.clone());
            let alone = median(results[s][c].1.clone());
            println!(
                "{name:<11} {n:>7} {sidecar:>14.0} {:>12.0} {alone:>16.0} {:>7.2}x",
                2.0 * sidecar,
                alone / sidecar
            );
        }
    }
}
