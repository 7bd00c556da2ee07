//! A lookup by an operation's field (`idem inspect --field
//! invoice_id=R-…`, the console's search) as the store grows: the
//! latency of `Records::list` with `ListFilter::fields`, for a value one
//! record holds and for one none holds, on SQLite and PostgreSQL; and, on
//! the same store, what the lookup index costs a write: a lone caller's
//! claim and completion of a fresh key (each its own commit), as latency.
//!
//! The records are loaded through the store's own batch claims and
//! finishes, 1,000 per call, each keeping its canonical operation (as
//! every record does by default). Then `Records::gc` runs once, timed: on
//! SQLite it brings the lookup index, written behind the claims, up to
//! date (what the idle indexer does while a store has no calls), so that
//! the lookups read it; elsewhere it finds nothing to do.
//!
//! `cargo bench -p idem-store --features postgres --bench lookup [--
//! sqlite|postgres]` (`IDEM_LOOKUP_SIZES=10000,1000000` to choose the
//! sizes, default 10 k and 1 M; both stores unless one is named). The
//! PostgreSQL half needs `IDEM_TEST_POSTGRES_URL`. It needs nothing but
//! this crate, so that a release build of it takes minutes, not the
//! policy runtime's.

use std::time::{Duration, Instant};

use idem_store::{
    ClaimOutcome, ClaimRequest, Digest, Ending, Finish, Holder, KeptOperation, ListFilter, Outcome,
    RecordKey, Store, StoreOptions,
};

/// The canonical operation of invoice `n`, as a record keeps it.
fn operation(n: u64) -> String {
    format!(
        r#"{{"fields":{{"amount":"{}","billing_period":"2026-11","currency":"EUR","customer":"c{}","invoice_id":"R-{n}"}},"kind":"charge","tenant":"acme"}}"#,
        100 + n % 50,
        n % 1000
    )
}

/// Loads invoices `from..to`, claimed and completed, 1,000 per store call.
async fn fill(store: &Store, from: u64, to: u64) {
    let mut n = from;
    while n < to {
        let chunk = (to - n).min(1_000);
        let requests: Vec<ClaimRequest> = (n..n + chunk)
            .map(|i| ClaimRequest {
                key: RecordKey::new("billing", Digest::of_bytes(format!("R-{i}").as_bytes())),
                policy_digest: format!("sha256:{}", "ab".repeat(32)),
                fingerprint: Digest::of_bytes(b"fp"),
                partition: format!("c{}", i % 1000),
                lease: Duration::from_secs(300),
                retention: Duration::from_secs(86_400),
                holder: Holder::this_process(),
                operation_digest: None,
                operation: Some(KeptOperation::Kept(operation(i))),
                ownership: None,
                effect_atomic: false,
            })
            .collect();
        let claims = store.writes().claim_many(requests).await.unwrap();
        let finishes = claims
            .into_iter()
            .map(|c| match c.unwrap() {
                ClaimOutcome::Claimed(c) => Finish {
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
    }
}

/// The latencies of looking up each of `values` as `invoice_id`, in ms,
/// sorted; each lookup must find `expect` records.
async fn lookups(store: &Store, values: &[String], expect: usize) -> Vec<f64> {
    let mut out = Vec::new();
    for value in values {
        let filter = ListFilter {
            namespace: Some("billing".into()),
            fields: vec![("invoice_id".into(), value.clone())],
            limit: Some(101),
            ..ListFilter::default()
        };
        let started = Instant::now();
        let found = store.records().list(filter).await.unwrap();
        out.push(started.elapsed().as_secs_f64() * 1e3);
        assert_eq!(found.len(), expect, "invoice_id={value}");
    }
    out.sort_by(|a, b| a.partial_cmp(b).unwrap());
    out
}

/// The latencies of `count` claims of fresh keys, each completed, one at
/// a time, in µs, sorted: what one caller's write costs on this store.
async fn claims(store: &Store, from: u64, count: u64) -> Vec<f64> {
    let mut out = Vec::new();
    for i in from..from + count {
        let request = ClaimRequest {
            key: RecordKey::new("billing", Digest::of_bytes(format!("W-{i}").as_bytes())),
            policy_digest: format!("sha256:{}", "ab".repeat(32)),
            fingerprint: Digest::of_bytes(b"fp"),
            partition: format!("c{}", i % 1000),
            lease: Duration::from_secs(300),
            retention: Duration::from_secs(86_400),
            holder: Holder::this_process(),
            operation_digest: None,
            operation: Some(KeptOperation::Kept(operation(i).replace("R-", "W-"))),
            ownership: None,
            effect_atomic: false,
        };
        let started = Instant::now();
        let ClaimOutcome::Claimed(claim) = store.writes().claim(request).await.unwrap() else {
            panic!("a fresh key");
        };
        store
            .writes()
            .complete(
                &claim.key,
                claim.fence,
                Outcome::new(0, b"receipt".to_vec()),
            )
            .await
            .unwrap();
        out.push(started.elapsed().as_secs_f64() * 1e6);
    }
    out.sort_by(|a, b| a.partial_cmp(b).unwrap());
    out
}

fn median(sorted: &[f64]) -> f64 {
    sorted[sorted.len() / 2]
}

async fn measure(name: &str, load_url: &str, url: &str, sizes: &[u64], samples: u64) {
    println!("{name}: lookup by invoice_id, {samples} lookups per size (median and max, ms)");
    println!(
        "{:>10} {:>12} {:>10} {:>14} {:>10} {:>8} {:>8} {:>14} {:>10}",
        "records",
        "found p50",
        "max",
        "none p50",
        "max",
        "load s",
        "index s",
        "claim p50 µs",
        "p90 µs"
    );
    let mut loaded = 0;
    for &size in sizes {
        let started = Instant::now();
        let store = idem_store::open(load_url, StoreOptions::default())
            .await
            .unwrap();
        fill(&store, loaded, size).await;
        drop(store);
        let load_s = started.elapsed().as_secs_f64();
        loaded = size;
        let store = idem_store::open(url, StoreOptions::default())
            .await
            .unwrap();
        let started = Instant::now();
        store.records().gc().await.unwrap();
        let index_s = started.elapsed().as_secs_f64();
        // Spread over the whole range: the first record and the last are
        // not where a scan finds them both quickly.
        let present: Vec<String> = (0..samples)
            .map(|i| format!("R-{}", (i * 7_919 + size / 2) % size))
            .collect();
        let absent: Vec<String> = (0..samples).map(|i| format!("R-none-{i}")).collect();
        // Once unmeasured: the first read after loading warms the cache.
        lookups(&store, &present[..1], 1).await;
        let found = lookups(&store, &present, 1).await;
        let none = lookups(&store, &absent, 0).await;
        // Fresh keys of their own (`W-…`), not counted among the records
        // the next size loads; once unmeasured to warm the statements.
        claims(&store, size * 10, 20).await;
        let writes = claims(&store, size * 10 + 20, samples * 20).await;
        println!(
            "{size:>10} {:>12.1} {:>10.1} {:>14.1} {:>10.1} {load_s:>8.0} {index_s:>8.1} {:>14.0} {:>10.0}",
            median(&found),
            found[found.len() - 1],
            median(&none),
            none[none.len() - 1],
            median(&writes),
            writes[writes.len() * 9 / 10],
        );
    }
}

fn main() {
    let quick = std::env::args().any(|a| a == "--test" || a == "--list");
    let sizes: Vec<u64> = if quick {
        vec![2_000]
    } else {
        std::env::var("IDEM_LOOKUP_SIZES")
            .map(|s| {
                s.split(',')
                    .map(|n| n.trim().parse().expect("IDEM_LOOKUP_SIZES: numbers"))
                    .collect()
            })
            .unwrap_or_else(|_| vec![10_000, 1_000_000])
    };
    let samples = if quick { 3 } else { 15 };
    let named: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let wants = |store: &str| named.is_empty() || named.iter().any(|n| n == store);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        if wants("sqlite") {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("idem.db");
            let load = format!("sqlite:{}?synchronous=normal", path.display());
            let url = format!("sqlite:{}", path.display());
            measure("SQLite", &load, &url, &sizes, samples).await;
        }
        if !wants("postgres") {
            return;
        }
        let Ok(base) = std::env::var("IDEM_TEST_POSTGRES_URL") else {
            println!("PostgreSQL: skipped (set IDEM_TEST_POSTGRES_URL to measure it)");
            return;
        };
        let schema = format!("idem_bench_lookup_{}", std::process::id());
        let url = format!("{base}?idem_schema={schema}&sslmode=disable&idem_pool_size=8");
        measure("PostgreSQL", &url, &url, &sizes, samples).await;
        let (client, connection) = tokio_postgres::connect(&base, tokio_postgres::NoTls)
            .await
            .expect("connect to drop the bench's schema");
        tokio::spawn(connection);
        client
            .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
            .await
            .expect("drop the bench's schema");
    });
}
