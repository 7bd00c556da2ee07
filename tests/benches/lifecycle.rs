//! What a policy's lifecycle costs a begin+complete, side by side in one
//! run, rounds interleaved:
//!
//! - records keeping their canonical operation vs not
//!   (`StoreOptions::keep_operations`), on SQLite and, with
//!   `IDEM_TEST_POSTGRES_URL`, PostgreSQL, 1 and 8 callers;
//! - a claim during a dual-read window (the replaced version derives the
//!   old key and the store is asked for it first) vs no window, SQLite, 1
//!   caller, fresh operations (the old key holds nothing: the full cost of
//!   looking);
//! - the namespace check: a registered namespace vs an unregistered one
//!   (the engine remembers an accepted digest, so this is one read at the
//!   first claim).
//!
//! `cargo bench -p idem-tests --bench lifecycle`

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use idem::core::{Operation, OperationLimits};
use idem::engine::{Begin, Engine, EngineOptions};
use idem::store::{Activation, Outcome, Store, StoreOptions};
use idem_tests::{load, policy_bytes};

fn op(n: u64) -> Operation {
    let json = format!(
        r#"{{"kind":"charge","tenant":"acme","fields":{{"customer":"c{}","billing_period":"2026-11","invoice_id":"i{n}","amount":"100","currency":"EUR"}}}}"#,
        n % 1000
    );
    Operation::from_json(&json, &OperationLimits::default()).unwrap()
}

/// `callers` concurrent tasks doing `per_caller` fresh begin+complete each;
/// operations per second.
async fn drive(engine: Arc<Engine>, callers: u64, per_caller: u64) -> f64 {
    let next = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..callers {
        let (engine, next) = (engine.clone(), next.clone());
        tasks.spawn(async move {
            for _ in 0..per_caller {
                let n = next.fetch_add(1, Ordering::Relaxed);
                match engine.begin(&op(n)).await.unwrap() {
                    Begin::Execute(e) => e
                        .complete(Outcome::new(0, b"receipt".to_vec()))
                        .await
                        .unwrap(),
                    other => panic!("expected a fresh claim: {other:?}"),
                }
            }
        });
    }
    while let Some(r) = tasks.join_next().await {
        r.unwrap();
    }
    (callers * per_caller) as f64 / start.elapsed().as_secs_f64()
}

/// What a round sets up besides the store's options.
#[derive(Clone, Copy, PartialEq)]
enum Setup {
    Plain,
    DualRead,
    Registered,
}

async fn rate(url: &str, keep: bool, setup: Setup, callers: u64, per: u64) -> f64 {
    let store = idem::store::open(
        url,
        StoreOptions {
            keep_operations: keep,
            ..StoreOptions::default()
        },
    )
    .await
    .unwrap();
    let policy = load("billing-charge");
    if setup == Setup::Registered {
        register(&store, &policy).await;
    }
    let mut engine = Engine::new(policy, store, EngineOptions::default());
    if setup == Setup::DualRead {
        engine = engine.with_dual_read(load("fixture-billing-v2-renamed"), u64::MAX);
    }
    drive(Arc::new(engine), callers, per).await
}

async fn register(store: &Store, policy: &idem::policy::LoadedPolicy) {
    store
        .registry()
        .activate_policy(Activation {
            namespace: policy.info().namespace.clone(),
            digest: policy.digest().to_string(),
            component: policy_bytes("billing-charge"),
            expected_active: None,
            forced: false,
            by: "bench".into(),
            reason: None,
            dual_read: None,
        })
        .await
        .unwrap();
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// A fresh store URL for one round: a SQLite file in `dir`, or a schema.
fn fresh(base: &Option<String>, dir: &std::path::Path, tag: &str) -> String {
    match base {
        None => format!("sqlite:{}", dir.join(format!("{tag}.db")).display()),
        Some(url) => format!(
            "{url}?idem_schema=idem_bench_lc_{}_{tag}&idem_pool_size=16&sslmode=disable",
            std::process::id()
        ),
    }
}

fn drop_schema(base: &Option<String>, tag: &str, rt: &tokio::runtime::Runtime) {
    let Some(url) = base else { return };
    let schema = format!("idem_bench_lc_{}_{tag}", std::process::id());
    rt.block_on(async {
        let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(conn);
        client
            .batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
            .await
            .unwrap();
    })
}

/// Medians of `rounds` interleaved rounds of `a` and `b`.
#[allow(clippy::too_many_arguments)]
fn pair(
    rt: &tokio::runtime::Runtime,
    base: &Option<String>,
    rounds: usize,
    callers: u64,
    per: u64,
    a: (bool, Setup),
    b: (bool, Setup),
    label: &str,
) -> (f64, f64) {
    let dir = tempfile::tempdir().unwrap();
    let (mut ra, mut rb) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        for (which, (keep, setup), rates) in [(0, a, &mut ra), (1, b, &mut rb)] {
            let tag = format!("{label}_{callers}_{round}_{which}");
            let url = fresh(base, dir.path(), &tag);
            rates.push(rt.block_on(rate(&url, keep, setup, callers, per)));
            drop_schema(base, &tag, rt);
        }
    }
    (median(ra), median(rb))
}

fn main() {
    // `cargo test --benches` runs benches once in test mode: keep that short.
    let quick = std::env::args().any(|a| a == "--test" || a == "--list");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let total: u64 = if quick { 16 } else { 600 };
    let rounds = if quick { 1 } else { 5 };
    let postgres = std::env::var("IDEM_TEST_POSTGRES_URL").ok();
    let mut stores = vec![("SQLite", None)];
    if let Some(url) = postgres {
        stores.push(("PostgreSQL", Some(url)));
    }
    println!("begin+complete, fresh operations, medians of {rounds} interleaved rounds of {total}");
    println!(
        "{:<11} {:>7} {:>24} {:>14} {:>14} {:>7}",
        "store", "callers", "what", "with ops/s", "without ops/s", "ratio"
    );
    for (name, base) in &stores {
        for callers in [1u64, 8] {
            let per = (total / callers).max(1);
            let (on, off) = pair(
                &rt,
                base,
                rounds,
                callers,
                per,
                (true, Setup::Plain),
                (false, Setup::Plain),
                "keep",
            );
            println!(
                "{name:<11} {callers:>7} {:>24} {on:>14.0} {off:>14.0} {:>6.2}x",
                "kept operation",
                on / off
            );
        }
    }
    let sqlite = None;
    let (dual, plain) = pair(
        &rt,
        &sqlite,
        rounds,
        1,
        total,
        (true, Setup::DualRead),
        (true, Setup::Plain),
        "dual",
    );
    println!(
        "{:<11} {:>7} {:>24} {dual:>14.0} {plain:>14.0} {:>6.2}x",
        "SQLite",
        1,
        "dual-read window",
        dual / plain
    );
    let (registered, open) = pair(
        &rt,
        &sqlite,
        rounds,
        1,
        total,
        (true, Setup::Registered),
        (true, Setup::Plain),
        "registered",
    );
    println!(
        "{:<11} {:>7} {:>24} {registered:>14.0} {open:>14.0} {:>6.2}x",
        "SQLite",
        1,
        "registered namespace",
        registered / open
    );
}
