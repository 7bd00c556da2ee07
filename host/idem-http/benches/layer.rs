//! The layer's overhead per request: a request through `IdempotencyLayer`
//! (read the body, hash it, derive, begin, run a trivial handler, store its
//! response, complete) against `begin` + `complete` alone on the same
//! engine and store. Every operation uses a fresh key, so both make the
//! same two durable writes, and both derive the key once in the policy.
//!
//! Interleaved rounds (alone, then the layer, then the other order in the
//! next round), each side's median and the median of the per-round ratios:
//! on a machine shared with other work, only figures taken side by side
//! compare. Two costs per request: wall-clock (what a client waits: the
//! disk's syncs and every thread wake-up included, so on a loaded virtual
//! machine it swings with the scheduler) and the process's CPU time (what
//! the work itself costs, every thread counted).
//!
//! SQLite always; PostgreSQL with `IDEM_TEST_POSTGRES_URL`.
//! `cargo bench -p idem-http --bench layer` (`IDEM_BENCH_OPS=N` requests
//! per side and round, default 300; `IDEM_BENCH_ROUNDS=N`, default 9).

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use idem::core::{Operation, OperationLimits};
use idem::engine::{Begin, Engine};
use idem::store::Outcome;
use idem_http::IdempotencyLayer;
use tower::{Layer, Service, ServiceExt, service_fn};

static NEXT: AtomicU64 = AtomicU64::new(0);

const BODY: &str = r#"{"customer":"cus_42","amount":"19.99","currency":"EUR"}"#;

fn fresh_key() -> String {
    format!(
        "bench-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// The operation the layer would make for the request: the same policy
/// work, without HTTP.
fn op(key: &str) -> Operation {
    let json = format!(
        r#"{{"kind":"http-request","tenant":"shop","fields":{{"idempotency_key":"{key}","method":"POST","path":"/charges","body_sha256":"{}"}}}}"#,
        "a".repeat(64)
    );
    Operation::from_json(&json, &OperationLimits::default()).unwrap()
}

/// This process's CPU time (every thread), in µs: what the work cost,
/// whatever the wait for the disk or for a thread to be woken.
fn cpu_us() -> f64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid timespec for the call to fill.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut t) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_PROCESS_CPUTIME_ID)");
    t.tv_sec as f64 * 1e6 + t.tv_nsec as f64 / 1e3
}

/// A side's cost per request: wall-clock and CPU µs.
#[derive(Clone, Copy)]
struct Cost {
    wall: f64,
    cpu: f64,
}

impl Cost {
    fn since(start: Instant, cpu: f64, n: usize) -> Cost {
        Cost {
            wall: start.elapsed().as_secs_f64() * 1e6 / n as f64,
            cpu: (cpu_us() - cpu) / n as f64,
        }
    }
}

/// `n` begin+complete through the engine.
async fn alone(engine: &Engine, n: usize) -> Cost {
    let (start, cpu) = (Instant::now(), cpu_us());
    for _ in 0..n {
        let Begin::Execute(execution) = engine.begin(&op(&fresh_key())).await.unwrap() else {
            panic!("a fresh key executes");
        };
        execution
            .complete(Outcome::new(201, &b"{\"id\":\"ch_1\"}"[..]))
            .await
            .unwrap();
    }
    Cost::since(start, cpu, n)
}

/// `n` requests through the layer.
async fn layered<S>(service: &S, n: usize) -> Cost
where
    S: Service<
            Request<Full<Bytes>>,
            Response = Response<idem_http::ResponseBody>,
            Error = Infallible,
        > + Clone
        + Send,
    S::Future: Send,
{
    let (start, cpu) = (Instant::now(), cpu_us());
    for _ in 0..n {
        let request = Request::post("/charges")
            .header("idempotency-key", fresh_key())
            .body(Full::new(Bytes::from_static(BODY.as_bytes())))
            .unwrap();
        let response = service.clone().oneshot(request).await.unwrap();
        assert_eq!(response.status(), 201);
        response.into_body().collect().await.unwrap();
    }
    Cost::since(start, cpu, n)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn bench_store(runtime: &tokio::runtime::Runtime, name: &str, url: &str) {
    let (n, rounds) = (
        env_or("IDEM_BENCH_OPS", 300),
        env_or("IDEM_BENCH_ROUNDS", 9),
    );
    let engine = runtime.block_on(idem_tests::engine_on("http-idempotency-key", url));
    let store_engine = engine.clone();
    let service = IdempotencyLayer::new(engine.clone())
        .tenant("shop")
        .layer(service_fn(|_req: Request<Full<Bytes>>| async {
            Ok::<_, Infallible>(
                Response::builder()
                    .status(201)
                    .header("content-type", "application/json")
                    .body(Full::new(Bytes::from_static(b"{\"id\":\"ch_1\"}")))
                    .unwrap(),
            )
        }));
    let mut rounds_out: Vec<(Cost, Cost)> = Vec::new();
    // Both sides run in a task on the runtime's workers, as a server runs
    // each connection (not on the thread that blocks on the runtime).
    let out = runtime
        .block_on(runtime.spawn(async move {
            // Warm-up: the store's first pages, the policy's instance pool.
            alone(&engine, 50).await;
            layered(&service, 50).await;
            for round in 0..rounds {
                rounds_out.push(if round % 2 == 0 {
                    let a = alone(&engine, n).await;
                    (a, layered(&service, n).await)
                } else {
                    let l = layered(&service, n).await;
                    (alone(&engine, n).await, l)
                });
            }
            rounds_out
        }))
        .unwrap();
    // Both sides recorded every end: nothing is left in progress.
    let left = runtime
        .block_on(
            store_engine
                .store()
                .records()
                .list(idem::store::ListFilter {
                    state: Some(idem::store::RecordState::InProgress),
                    ..Default::default()
                }),
        )
        .unwrap();
    assert!(
        left.is_empty(),
        "{} requests were not completed",
        left.len()
    );
    let m = |f: &dyn Fn(&(Cost, Cost)) -> f64| median(out.iter().map(f).collect());
    println!(
        "{name:<11} {:>9.0} {:>9.0} {:>7.2}x {:>9.0} {:>9.0} {:>7.2}x",
        m(&|(a, _)| a.wall),
        m(&|(_, l)| l.wall),
        m(&|(a, l)| l.wall / a.wall),
        m(&|(a, _)| a.cpu),
        m(&|(_, l)| l.cpu),
        m(&|(a, l)| l.cpu / a.cpu),
    );
}

fn main() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    println!(
        "the layer's overhead per request: begin+complete alone vs through the layer, fresh keys, µs, medians of interleaved rounds"
    );
    println!(
        "{:<11} {:>9} {:>9} {:>8} {:>9} {:>9} {:>8}",
        "store", "wall alone", "layer", "ratio", "cpu alone", "layer", "ratio"
    );
    bench_store(
        &runtime,
        "SQLite",
        &format!("sqlite:{}", dir.path().join("idem.db").display()),
    );
    match std::env::var("IDEM_TEST_POSTGRES_URL") {
        Ok(url) => {
            let schema = idem_store_conformance::fresh_schema();
            let sep = if url.contains('?') { '&' } else { '?' };
            bench_store(
                &runtime,
                "PostgreSQL",
                &format!("{url}{sep}idem_schema={schema}"),
            );
        }
        Err(_) => println!("PostgreSQL  SKIPPED (set IDEM_TEST_POSTGRES_URL)"),
    }
}
