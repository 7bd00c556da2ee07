//! Claim latency as the store grows, and during a `gc` of a large backlog.
//!
//! 1. For 10 k, 1 M and 10 M retained records (each with its attempt-log
//!    entries, loaded through the store's own batch claims and finishes):
//!    the latency of fresh claims (`Engine::begin`, policy included), p50
//!    and p99 over sequential claims, on SQLite (WAL, `synchronous=FULL`
//!    while measuring) and PostgreSQL.
//! 2. With 1 M records past their retention: the same claims' p99 while
//!    `gc` deletes them (in its bounded batches), against idle.
//!
//! `cargo bench -p idem-tests --bench growth [-- sqlite|postgres]`
//! (`IDEM_GROWTH_SIZES=10000,1000000` to choose the sizes; default 10 k,
//! 1 M, 10 M; `IDEM_GROWTH_GC=N` the gc backlog, default 1 M; both stores
//! unless one is named). The PostgreSQL half needs `IDEM_TEST_POSTGRES_URL`.

use std::time::{Duration, Instant};

use idem::core::{Operation, OperationLimits};
use idem::engine::{Begin, Engine, EngineOptions};
use idem::store::{ClaimRequest, Ending, Finish, Holder, Outcome, RecordKey, Store, StoreOptions};
use idem_tests::load;

/// A fresh operation: every begin claims a new key.
fn op(tag: &str, n: u64) -> Operation {
    let json = format!(
        r#"{{"kind":"charge","tenant":"acme","fields":{{"customer":"c{}","billing_period":"2026-11","invoice_id":"{tag}-{n}","amount":"100","currency":"EUR"}}}}"#,
        n % 1000
    );
    Operation::from_json(&json, &OperationLimits::default()).unwrap()
}

/// Loads the records numbered `from..to` (claimed and completed, with
/// their log entries) through the store's batch calls, 1,000 per call,
/// retained for `retention`.
async fn fill(store: &Store, from: u64, to: u64, retention: Duration, tag: &str) {
    let started = Instant::now();
    let mut n = from;
    while n < to {
        let chunk = (to - n).min(1_000);
        let requests: Vec<ClaimRequest> = (n..n + chunk)
            .map(|i| ClaimRequest {
                key: RecordKey::new(
                    "billing",
                    idem::core::Digest::of_bytes(format!("{tag}-{i}").as_bytes()),
                ),
                policy_digest: format!("sha256:{}", "ab".repeat(32)),
                fingerprint: idem::core::Digest::of_bytes(b"fp"),
                partition: format!("c{}", i % 1000),
                lease: Duration::from_secs(300),
                retention,
                holder: Holder::this_process(),
                operation_digest: None,
                operation: None,
                ownership: None,
                effect_atomic: false,
            })
            .collect();
        let claims = store.writes().claim_many(requests).await.unwrap();
        let finishes = claims
            .into_iter()
            .map(|c| match c.unwrap() {
                idem::store::ClaimOutcome::Claimed(c) => Finish {
                    key: c.key,
                    fence: c.fence,
                    ending: Ending::Completed,
                    outcome: Outcome::new(0, b"receipt".to_vec()),
                },
                other => panic!("a fresh key: {other:?}"),
            })
            .collect();
        for r in store.writes().finish_many(finishes).await.unwrap() {
            r.unwrap();
        }
        n += chunk;
        if n.is_multiple_of(1_000_000) {
            eprintln!(
                "  loaded {n} records ({:.0} s)",
                started.elapsed().as_secs_f64()
            );
        }
    }
}

/// Latencies of `count` sequential fresh claims (begin, then complete
/// outside the timing), in microseconds, sorted.
async fn claim_latencies(engine: &Engine, tag: &str, count: u64) -> Vec<f64> {
    let mut out = Vec::with_capacity(count as usize);
    for n in 0..count {
        let op = op(tag, n);
        let started = Instant::now();
        let begun = engine.begin(&op).await.unwrap();
        out.push(started.elapsed().as_secs_f64() * 1e6);
        match begun {
            Begin::Execute(e) => e.complete(Outcome::new(0, b"ok".to_vec())).await.unwrap(),
            other => panic!("expected a fresh claim: {other:?}"),
        }
    }
    out.sort_by(|a, b| a.partial_cmp(b).unwrap());
    out
}

fn pct(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// Where the stores live: a SQLite file, or a PostgreSQL schema.
enum Place {
    Sqlite(tempfile::TempDir),
    Postgres(String, String),
}

impl Place {
    /// The URL; `fast` for loading (SQLite without syncs), else as
    /// measured (SQLite `synchronous=FULL`).
    fn url(&self, fast: bool) -> String {
        match self {
            Place::Sqlite(dir) => {
                let path = dir.path().join("idem.db");
                let sync = if fast { "?synchronous=normal" } else { "" };
                format!("sqlite:{}{sync}", path.display())
            }
            Place::Postgres(url, schema) => {
                format!("{url}?idem_schema={schema}&sslmode=disable&idem_pool_size=8")
            }
        }
    }
}

async fn open(url: &str) -> Store {
    idem::store::open(url, StoreOptions::default())
        .await
        .unwrap()
}

async fn growth(place: &Place, sizes: &[u64], samples: u64) {
    let mut loaded = 0;
    println!(
        "{:>12} {:>10} {:>10} {:>14}",
        "records", "p50 µs", "p99 µs", "load s"
    );
    let mut base: Option<(f64, f64)> = None;
    for &size in sizes {
        let started = Instant::now();
        let store = open(&place.url(true)).await;
        let retention = Duration::from_secs(86_400);
        fill(&store, loaded, size, retention, "retained").await;
        drop(store);
        let load_s = started.elapsed().as_secs_f64();
        loaded = size;
        let engine = Engine::new(
            load("billing-charge"),
            open(&place.url(false)).await,
            EngineOptions::default(),
        );
        let lat = claim_latencies(&engine, &format!("probe-{size}"), samples).await;
        engine.flush_log().await;
        let (p50, p99) = (pct(&lat, 0.5), pct(&lat, 0.99));
        let (b50, b99) = *base.get_or_insert((p50, p99));
        println!(
            "{size:>12} {p50:>10.0} {p99:>10.0} {load_s:>14.0}   (p50 {:.2}x, p99 {:.2}x the smallest)",
            p50 / b50,
            p99 / b99
        );
    }
}

async fn gc_stall(place: &Place, backlog: u64, samples: u64) {
    let store = open(&place.url(true)).await;
    let started = Instant::now();
    fill(&store, 0, backlog, Duration::from_secs(1), "expiring").await;
    eprintln!(
        "  loaded {backlog} expiring records in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    drop(store);
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let store = open(&place.url(false)).await;
    let engine = Engine::new(
        load("billing-charge"),
        store.clone(),
        EngineOptions::default(),
    );
    let idle = claim_latencies(&engine, "idle", samples).await;
    let gc_store = store.clone();
    let gc_started = Instant::now();
    let gc = tokio::spawn(async move { gc_store.records().gc().await.unwrap() });
    let mut during = Vec::new();
    let mut round = 0;
    while !gc.is_finished() {
        let mut lat = claim_latencies(&engine, &format!("during-{round}"), 50).await;
        during.append(&mut lat);
        round += 1;
    }
    let removed = gc.await.unwrap();
    let gc_s = gc_started.elapsed().as_secs_f64();
    during.sort_by(|a, b| a.partial_cmp(b).unwrap());
    if during.is_empty() {
        println!("  gc removed {removed} in {gc_s:.1} s, before a claim was measured");
        return;
    }
    println!(
        "  gc removed {removed} records in {gc_s:.1} s; claims idle p50 {:.0} µs p99 {:.0} µs; during gc ({} claims) p50 {:.0} µs p99 {:.0} µs; p99 during / idle {:.2}x (target <= 2x)",
        pct(&idle, 0.5),
        pct(&idle, 0.99),
        during.len(),
        pct(&during, 0.5),
        pct(&during, 0.99),
        pct(&during, 0.99) / pct(&idle, 0.99)
    );
}

fn sizes_from_env(quick: bool) -> Vec<u64> {
    if quick {
        return vec![100, 1_000];
    }
    match std::env::var("IDEM_GROWTH_SIZES") {
        Ok(s) => s
            .split(',')
            .map(|n| n.trim().parse().expect("IDEM_GROWTH_SIZES: numbers"))
            .collect(),
        Err(_) => vec![10_000, 1_000_000, 10_000_000],
    }
}

fn main() {
    let quick = std::env::args().any(|a| a == "--test" || a == "--list");
    let sizes = sizes_from_env(quick);
    let samples = if quick { 20 } else { 2_000 };
    let backlog: u64 = if quick {
        2_000
    } else {
        std::env::var("IDEM_GROWTH_GC")
            .ok()
            .map(|n| n.parse().expect("IDEM_GROWTH_GC: a number"))
            .unwrap_or(1_000_000)
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let named: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let wants = |store: &str| named.is_empty() || named.iter().any(|n| n == store);
    rt.block_on(async {
        if wants("sqlite") {
            println!("claim latency as the store grows, SQLite (synchronous=FULL), {samples} fresh claims per size");
            let place = Place::Sqlite(tempfile::tempdir().unwrap());
            growth(&place, &sizes, samples).await;
            println!("gc of {backlog} expired records on SQLite, claims meanwhile:");
            gc_stall(&Place::Sqlite(tempfile::tempdir().unwrap()), backlog, samples).await;
        }
        if !wants("postgres") {
            return;
        }
        let Ok(url) = std::env::var("IDEM_TEST_POSTGRES_URL") else {
            println!("PostgreSQL: skipped (set IDEM_TEST_POSTGRES_URL to measure it)");
            return;
        };
        for (what, schema) in [("growth", "g"), ("gc", "c")] {
            let schema = format!("idem_bench_growth_{schema}_{}", std::process::id());
            let place = Place::Postgres(url.clone(), schema.clone());
            if what == "growth" {
                println!("\nclaim latency as the store grows, PostgreSQL, {samples} fresh claims per size");
                growth(&place, &sizes, samples).await;
            } else {
                println!("gc of {backlog} expired records on PostgreSQL, claims meanwhile:");
                gc_stall(&place, backlog, samples).await;
            }
            idem_store_conformance::drop_postgres_schema(&place.url(false));
        }
    });
}
