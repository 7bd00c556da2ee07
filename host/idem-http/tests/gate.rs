//! The gate layer (`GateLayer`) in front of a downstream served over real
//! HTTP on loopback, on the memory store, a SQLite file and PostgreSQL:
//! two holders of one key with fences 1 and 2 — the downstream applies
//! once, the lower fence is refused once the higher is seen, a repeat
//! replays — and the other answers (in flight, another request, a missing
//! or invalid header, a 5xx that releases the key).

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use axum::{Extension, Router};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use idem::store::{Store, StoreOptions};
use idem_http::{GateAdmission, GateLayer, IDEM_FENCE, IDEMPOTENT_REPLAYED};
use idem_tests::{TestStore, postgres_url};
use serde_json::Value;
use tokio::sync::Semaphore;

/// The downstream: how often it applied, and a permit its `/slow` charges
/// wait for.
struct Downstream {
    applied: AtomicU32,
    release: Semaphore,
    started: Semaphore,
}

async fn charge(
    State(d): State<Arc<Downstream>>,
    Extension(admission): Extension<GateAdmission>,
    body: String,
) -> (StatusCode, String) {
    let n = d.applied.fetch_add(1, Ordering::SeqCst) + 1;
    let receipt = format!(
        r#"{{"charge":{n},"fence":{},"body":{body:?}}}"#,
        admission.fence
    );
    (StatusCode::CREATED, receipt)
}

async fn slow(State(d): State<Arc<Downstream>>) -> &'static str {
    d.applied.fetch_add(1, Ordering::SeqCst);
    d.started.add_permits(1);
    let _permit = d.release.acquire().await.unwrap();
    "slow charge"
}

async fn flaky(State(d): State<Arc<Downstream>>) -> (StatusCode, &'static str) {
    // The first call fails having applied nothing; the next applies.
    if d.applied.fetch_add(1, Ordering::SeqCst) == 0 {
        (StatusCode::SERVICE_UNAVAILABLE, "the bank is down")
    } else {
        (StatusCode::OK, "charged")
    }
}

/// Serves the downstream behind the gate on a free loopback port.
async fn serve(store: &Store) -> (String, Arc<Downstream>) {
    let downstream = Arc::new(Downstream {
        applied: AtomicU32::new(0),
        release: Semaphore::new(0),
        started: Semaphore::new(0),
    });
    let app = Router::new()
        .route("/charges", post(charge))
        .route("/slow", post(slow))
        .route("/flaky", post(flaky))
        .layer(GateLayer::new(store).gate("charges"))
        .with_state(downstream.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}"), downstream)
}

struct Answer {
    status: u16,
    replayed: bool,
    retry_after: Option<String>,
    body: String,
}

impl Answer {
    fn problem(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }

    fn slug(&self) -> String {
        let p = self.problem();
        p["type"]
            .as_str()
            .and_then(|t| t.strip_prefix(idem_http::problem::TYPE_PREFIX))
            .unwrap_or("")
            .to_string()
    }
}

async fn post_to(
    base: &str,
    path: &str,
    key: Option<&str>,
    fence: Option<&str>,
    body: &str,
) -> Answer {
    let client: Client<HttpConnector, Full<Bytes>> =
        Client::builder(TokioExecutor::new()).build_http();
    let mut request = http::Request::post(format!("{base}{path}"));
    if let Some(key) = key {
        request = request.header("idempotency-key", key);
    }
    if let Some(fence) = fence {
        request = request.header(IDEM_FENCE, fence);
    }
    let request = request
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap();
    let response = client.request(request).await.unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    // Every answer to a request with a key says whether it is a replay.
    assert!(
        key.is_none() || headers.contains_key(IDEMPOTENT_REPLAYED),
        "{status}: no {IDEMPOTENT_REPLAYED} header"
    );
    let body = response.into_body().collect().await.unwrap().to_bytes();
    Answer {
        status,
        replayed: headers
            .get(IDEMPOTENT_REPLAYED)
            .is_some_and(|v| v == "true"),
        retry_after: headers
            .get("retry-after")
            .map(|v| v.to_str().unwrap().to_string()),
        body: String::from_utf8(body.to_vec()).unwrap(),
    }
}

/// Memory, a SQLite file and, when the environment names one, a fresh
/// PostgreSQL schema.
async fn stores(test: &str) -> Vec<(Store, Option<TestStore>)> {
    let mut out = vec![(
        idem::store::open("memory:", StoreOptions::default())
            .await
            .unwrap(),
        None,
    )];
    let mut places = vec![TestStore::sqlite()];
    if let Some(url) = postgres_url(test) {
        places.push(TestStore::postgres(&url));
    }
    for place in places {
        let store = idem::store::open(&place.store, StoreOptions::default())
            .await
            .unwrap();
        out.push((store, Some(place)));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fences_one_and_two_in_either_order_apply_once_refuse_the_lower_and_replay() {
    for (store, _place) in stores("gate_layer_fences_in_either_order").await {
        let (base, downstream) = serve(&store).await;
        let name = store.describe().to_string();
        // 1 then 2: 1 applies; 2 is replayed 1's response; 1 is refused.
        let first = post_to(&base, "/charges", Some("a"), Some("1"), "100 EUR").await;
        assert_eq!((first.status, first.replayed), (201, false), "{name}");
        let second = post_to(&base, "/charges", Some("a"), Some("2"), "100 EUR").await;
        assert_eq!((second.status, second.replayed), (201, true), "{name}");
        assert_eq!(second.body, first.body);
        let late = post_to(&base, "/charges", Some("a"), Some("1"), "100 EUR").await;
        assert_eq!((late.status, late.slug().as_str()), (409, "stale-fence"));
        assert_eq!(late.problem()["highest_fence"], 2);
        // 2 then 1: 2 applies, 1 is refused, 2 again replays.
        let two = post_to(&base, "/charges", Some("b"), Some("2"), "100 EUR").await;
        assert_eq!((two.status, two.replayed), (201, false));
        let one = post_to(&base, "/charges", Some("b"), Some("1"), "100 EUR").await;
        assert_eq!((one.status, one.slug().as_str()), (409, "stale-fence"));
        let again = post_to(&base, "/charges", Some("b"), Some("2"), "100 EUR").await;
        assert_eq!(
            (again.status, again.replayed, again.body),
            (201, true, two.body)
        );
        assert_eq!(
            downstream.applied.load(Ordering::SeqCst),
            2,
            "{name}: once per key"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_in_flight_is_answered_409_with_retry_after_and_the_rest_of_the_answers() {
    for (store, _place) in stores("gate_layer_in_flight").await {
        let (base, downstream) = serve(&store).await;
        let slow = tokio::spawn({
            let base = base.clone();
            async move { post_to(&base, "/slow", Some("s"), Some("1"), "").await }
        });
        downstream.started.acquire().await.unwrap().forget();
        // A higher fence while 1 is applied: come back (and 2 is now the
        // highest, so 1 is refused from here on).
        let busy = post_to(&base, "/slow", Some("s"), Some("2"), "").await;
        assert_eq!(
            (busy.status, busy.slug().as_str()),
            (409, "request-in-flight")
        );
        assert!(busy.retry_after.is_some());
        assert_eq!(busy.problem()["in_flight_fence"], 1);
        downstream.release.add_permits(1);
        let done = slow.await.unwrap();
        assert_eq!((done.status, done.body.as_str()), (200, "slow charge"));
        let replay = post_to(&base, "/slow", Some("s"), Some("2"), "").await;
        assert_eq!((replay.status, replay.replayed), (200, true));
        let stale = post_to(&base, "/slow", Some("s"), Some("1"), "").await;
        assert_eq!(stale.slug(), "stale-fence");
        assert_eq!(downstream.applied.load(Ordering::SeqCst), 1);

        // Another request under a key: 422. Missing or invalid headers: 400.
        let reused = post_to(&base, "/slow", Some("s"), Some("3"), "other body").await;
        assert_eq!((reused.status, reused.slug().as_str()), (422, "key-reused"));
        let no_key = post_to(&base, "/charges", None, Some("1"), "").await;
        assert_eq!(
            (no_key.status, no_key.slug().as_str()),
            (400, "missing-idempotency-key")
        );
        let no_fence = post_to(&base, "/charges", Some("x"), None, "").await;
        assert_eq!(
            (no_fence.status, no_fence.slug().as_str()),
            (400, "missing-fence")
        );
        let bad_fence = post_to(&base, "/charges", Some("x"), Some("-1"), "").await;
        assert_eq!(
            (bad_fence.status, bad_fence.slug().as_str()),
            (400, "invalid-fence")
        );
        assert_eq!(downstream.applied.load(Ordering::SeqCst), 1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_5xx_releases_the_key_for_the_next_holder() {
    for (store, _place) in stores("gate_layer_5xx_releases").await {
        let (base, downstream) = serve(&store).await;
        let failed = post_to(&base, "/flaky", Some("f"), Some("1"), "").await;
        assert_eq!(failed.status, 503);
        let next = post_to(&base, "/flaky", Some("f"), Some("2"), "").await;
        assert_eq!((next.status, next.replayed), (200, false));
        let repeat = post_to(&base, "/flaky", Some("f"), Some("2"), "").await;
        assert_eq!((repeat.status, repeat.replayed), (200, true));
        assert_eq!(downstream.applied.load(Ordering::SeqCst), 2);
    }
}

/// While the handler runs the layer extends its admission's window, so a
/// handler slower than the window still holds its key: a higher fence
/// arriving long after the first window is told the key is in flight, not
/// admitted beside it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_slower_than_its_window_keeps_the_key() {
    let place = TestStore::sqlite();
    let store = idem::store::open(&place.store, StoreOptions::default())
        .await
        .unwrap();
    let downstream = Arc::new(Downstream {
        applied: AtomicU32::new(0),
        release: Semaphore::new(0),
        started: Semaphore::new(0),
    });
    let window = std::time::Duration::from_secs(1);
    let app = Router::new()
        .route("/slow", post(slow))
        .layer(GateLayer::new(&store).gate("charges").window(window))
        .with_state(downstream.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    let first = tokio::spawn({
        let base = base.clone();
        async move { post_to(&base, "/slow", Some("w"), Some("1"), "").await }
    });
    downstream.started.acquire().await.unwrap().forget();
    // Well past the first window: unextended, it would have lapsed.
    tokio::time::sleep(window * 3).await;
    // Admitted instead, it would wait in the handler for a permit: bounded.
    let second = tokio::time::timeout(
        std::time::Duration::from_secs(30),
        post_to(&base, "/slow", Some("w"), Some("2"), ""),
    )
    .await
    .expect("the second holder was admitted beside the first");
    assert_eq!(
        (second.status, second.slug().as_str()),
        (409, "request-in-flight")
    );
    downstream.release.add_permits(1);
    assert_eq!(first.await.unwrap().status, 200);
    let replay = post_to(&base, "/slow", Some("w"), Some("2"), "").await;
    assert_eq!((replay.status, replay.replayed), (200, true));
    assert_eq!(downstream.applied.load(Ordering::SeqCst), 1);
}
