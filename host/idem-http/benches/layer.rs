//! The layer's overhead per request: a request through `IdempotencyLayer`
//! (read the body, hash it, derive, begin, run a trivial handler, store its
//! response, complete) against `begin` + `complete` alone on the same
//! engine and store, side by side in one run. Every iteration uses a fresh
//! key, so both make the same two durable writes.
//!
//! SQLite always; PostgreSQL with `IDEM_TEST_POSTGRES_URL`.
//! `cargo bench -p idem-http --bench layer`

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{Criterion, criterion_group, criterion_main};
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use idem::core::{Operation, OperationLimits};
use idem::engine::{Begin, Engine, EngineOptions};
use idem::store::{Outcome, StoreOptions};
use idem_http::IdempotencyLayer;
use tower::{Layer, ServiceExt, service_fn};

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

async fn engine_on(url: &str) -> Engine {
    let store = idem::store::open(url, StoreOptions::default())
        .await
        .unwrap();
    Engine::new(
        idem_tests::load("http-idempotency-key"),
        store,
        EngineOptions::default(),
    )
}

fn bench_store(c: &mut Criterion, name: &str, url: &str) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let engine = runtime.block_on(engine_on(url));
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
    let mut group = c.benchmark_group(name);
    group
        .sample_size(30)
        .measurement_time(Duration::from_secs(8));
    group.bench_function("begin+complete", |b| {
        b.iter_custom(|iters| {
            runtime.block_on(async {
                let start = Instant::now();
                for _ in 0..iters {
                    let Begin::Execute(execution) = engine.begin(&op(&fresh_key())).await.unwrap()
                    else {
                        panic!("a fresh key executes");
                    };
                    execution
                        .complete(Outcome::new(201, &b"{\"id\":\"ch_1\"}"[..]))
                        .await
                        .unwrap();
                }
                start.elapsed()
            })
        })
    });
    group.bench_function("through the layer", |b| {
        b.iter_custom(|iters| {
            runtime.block_on(async {
                let start = Instant::now();
                for _ in 0..iters {
                    let request = Request::post("/charges")
                        .header("idempotency-key", fresh_key())
                        .body(Full::new(Bytes::from_static(BODY.as_bytes())))
                        .unwrap();
                    let response = service.clone().oneshot(request).await.unwrap();
                    assert_eq!(response.status(), 201);
                    response.into_body().collect().await.unwrap();
                }
                start.elapsed()
            })
        })
    });
    group.finish();
}

fn layer(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    bench_store(
        c,
        "sqlite",
        &format!("sqlite:{}", dir.path().join("idem.db").display()),
    );
    if let Ok(url) = std::env::var("IDEM_TEST_POSTGRES_URL") {
        let schema = idem_store::conformance::fresh_schema();
        let sep = if url.contains('?') { '&' } else { '?' };
        bench_store(c, "postgres", &format!("{url}{sep}idem_schema={schema}"));
    }
}

criterion_group!(benches, layer);
criterion_main!(benches);
