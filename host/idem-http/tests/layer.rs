//! The layer in front of an axum Router: each of the draft's answers, what
//! the handler sees, and what is stored, on the in-memory store (the
//! replay path on SQLite and PostgreSQL; `Retry-After` for a key in flight
//! on a SQLite file whose clock the test holds).

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, Request, Response, StatusCode};
use axum::routing::{get, post};
use axum::{Extension, Router};
use http_body_util::BodyExt;
use idem::engine::{Engine, EngineOptions};
use idem::store::StoreOptions;
use idem_http::{FencedKey, IdempotencyLayer};
use tokio::sync::Semaphore;
use tower::ServiceExt;

/// What the handlers saw: how often they ran, and each run's claim.
struct Seen {
    runs: AtomicU32,
    claims: std::sync::Mutex<Vec<FencedKey>>,
    /// Handlers of `/slow` wait for a permit here.
    gate: Option<Arc<Semaphore>>,
    /// Handlers of `/slow` add a permit here when they start.
    started: Arc<Semaphore>,
}

impl Default for Seen {
    fn default() -> Self {
        Seen {
            runs: AtomicU32::new(0),
            claims: Default::default(),
            gate: None,
            started: Arc::new(Semaphore::new(0)),
        }
    }
}

async fn charge(
    State(seen): State<Arc<Seen>>,
    Extension(claim): Extension<FencedKey>,
    body: String,
) -> Response<Body> {
    let n = seen.runs.fetch_add(1, Ordering::SeqCst) + 1;
    seen.claims.lock().unwrap().push(claim.clone());
    Response::builder()
        .status(StatusCode::CREATED)
        .header("content-type", "application/json")
        .header("location", format!("/charges/{n}"))
        .header("set-cookie", "session=abc")
        .body(Body::from(format!(
            r#"{{"charge":{n},"fence":{},"body":{body:?}}}"#,
            claim.fence
        )))
        .unwrap()
}

async fn slow(State(seen): State<Arc<Seen>>, Extension(_): Extension<FencedKey>) -> &'static str {
    seen.runs.fetch_add(1, Ordering::SeqCst);
    seen.started.add_permits(1);
    let gate = seen.gate.clone().expect("a gate for /slow");
    let _permit = gate.acquire().await.unwrap();
    "done"
}

async fn status(State(seen): State<Arc<Seen>>, body: String) -> (StatusCode, String) {
    let n = seen.runs.fetch_add(1, Ordering::SeqCst) + 1;
    let code = body.parse::<u16>().unwrap();
    (StatusCode::from_u16(code).unwrap(), format!("run {n}"))
}

async fn big(State(seen): State<Arc<Seen>>) -> String {
    seen.runs.fetch_add(1, Ordering::SeqCst);
    "x".repeat(100_000)
}

async fn read(State(seen): State<Arc<Seen>>) -> String {
    let n = seen.runs.fetch_add(1, Ordering::SeqCst) + 1;
    format!("read {n}")
}

fn app(engine: Engine, seen: Arc<Seen>) -> Router {
    Router::new()
        .route("/charges", post(charge))
        .route("/slow", post(slow))
        .route("/status", post(status))
        .route("/big", post(big))
        .route("/read", get(read).post(read))
        .layer(
            IdempotencyLayer::new(engine)
                .tenant("shop")
                .body_limit(1024),
        )
        .with_state(seen)
}

fn request(method: &str, path: &str, key: Option<&str>, body: &str) -> Request<Body> {
    let mut builder = Request::builder().method(method).uri(path);
    if let Some(key) = key {
        builder = builder.header("idempotency-key", key);
    }
    builder.body(Body::from(body.to_string())).unwrap()
}

struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    body: String,
}

impl Answer {
    fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }

    /// Checks that this is a problem of type `slug` with `status`.
    fn assert_problem(&self, status: StatusCode, slug: &str) {
        assert_eq!(self.status, status, "{}", self.body);
        assert_eq!(self.headers["content-type"], "application/problem+json");
        let json = self.json();
        assert_eq!(
            json["type"],
            format!("{}{slug}", idem_http::problem::TYPE_PREFIX)
        );
        assert_eq!(json["status"], status.as_u16());
        assert!(
            json["detail"].as_str().is_some_and(|d| !d.is_empty()),
            "{json}"
        );
    }
}

async fn send(app: &Router, request: Request<Body>) -> Answer {
    let response = app.clone().oneshot(request).await.unwrap();
    let (parts, body) = response.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    Answer {
        status: parts.status,
        headers: parts.headers,
        body: String::from_utf8(body.to_vec()).unwrap(),
    }
}

/// First request runs with a fenced key; the retry gets the stored status,
/// the replayed headers (not the cookie) and the body, marked replayed.
async fn replays_a_completed_request(url: &str) {
    let seen = Arc::new(Seen::default());
    let app = app(
        idem_tests::engine_on("http-idempotency-key", url).await,
        seen.clone(),
    );
    let first = send(&app, request("POST", "/charges", Some("k-1"), "100 EUR")).await;
    assert_eq!(first.status, StatusCode::CREATED);
    assert_eq!(first.headers["idempotent-replayed"], "false");
    let again = send(
        &app,
        request("POST", "/charges", Some("\"k-1\""), "100 EUR"),
    )
    .await;
    assert_eq!(again.status, StatusCode::CREATED);
    assert_eq!(again.headers["idempotent-replayed"], "true");
    assert_eq!(again.headers["content-type"], "application/json");
    assert_eq!(again.headers["location"], "/charges/1");
    assert!(
        again.headers.get("set-cookie").is_none(),
        "cookies are never stored"
    );
    assert_eq!(again.body, first.body);
    assert_eq!(seen.runs.load(Ordering::SeqCst), 1);
    let claims = seen.claims.lock().unwrap().clone();
    assert_eq!(claims.len(), 1);
    assert_eq!(claims[0].key.len(), 64);
    assert_eq!(claims[0].attempt, 1);
    assert!(!claims[0].take_over);
    assert!(
        first
            .body
            .contains(&format!("\"fence\":{}", claims[0].fence))
    );
}

#[tokio::test]
async fn replays_a_completed_request_in_memory() {
    replays_a_completed_request("memory:").await;
}

#[tokio::test]
async fn replays_a_completed_request_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    replays_a_completed_request(&format!("sqlite:{}", dir.path().join("idem.db").display())).await;
}

#[tokio::test]
async fn replays_a_completed_request_on_postgres() {
    let Some(url) = idem_tests::postgres_url("replays_a_completed_request_on_postgres") else {
        return;
    };
    let schema = idem_store_conformance::fresh_schema();
    let sep = if url.contains('?') { '&' } else { '?' };
    replays_a_completed_request(&format!("{url}{sep}idem_schema={schema}&idem_pool_size=2")).await;
}

#[tokio::test]
async fn a_missing_key_is_a_400_and_nothing_runs() {
    let seen = Arc::new(Seen::default());
    let app = app(
        idem_tests::engine_on("http-idempotency-key", "memory:").await,
        seen.clone(),
    );
    let answer = send(&app, request("POST", "/charges", None, "100 EUR")).await;
    answer.assert_problem(StatusCode::BAD_REQUEST, "missing-idempotency-key");
    assert_eq!(answer.json()["field"], "idempotency_key");
    assert_eq!(seen.runs.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn bad_key_headers_are_400s_naming_the_header() {
    let seen = Arc::new(Seen::default());
    let app = app(
        idem_tests::engine_on("http-idempotency-key", "memory:").await,
        seen.clone(),
    );
    let twice = Request::builder()
        .method("POST")
        .uri("/charges")
        .header("idempotency-key", "a")
        .header("idempotency-key", "b")
        .body(Body::empty())
        .unwrap();
    let answer = send(&app, twice).await;
    answer.assert_problem(StatusCode::BAD_REQUEST, "invalid-header");
    assert!(
        answer.json()["detail"]
            .as_str()
            .unwrap()
            .contains("more than one `idempotency-key`")
    );
    let long = "k".repeat(300);
    let answer = send(&app, request("POST", "/charges", Some(&long), "")).await;
    answer.assert_problem(StatusCode::BAD_REQUEST, "refused-by-policy");
    assert_eq!(answer.json()["code"], "invalid-value");
    assert_eq!(seen.runs.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn the_key_reused_with_another_payload_is_a_422() {
    let seen = Arc::new(Seen::default());
    let app = app(
        idem_tests::engine_on("http-idempotency-key", "memory:").await,
        seen.clone(),
    );
    let first = send(&app, request("POST", "/charges", Some("k-2"), "100 EUR")).await;
    assert_eq!(first.status, StatusCode::CREATED);
    let other_body = send(&app, request("POST", "/charges", Some("k-2"), "900 EUR")).await;
    other_body.assert_problem(StatusCode::UNPROCESSABLE_ENTITY, "key-reused");
    let other_path = send(&app, request("POST", "/read", Some("k-2"), "100 EUR")).await;
    other_path.assert_problem(StatusCode::UNPROCESSABLE_ENTITY, "key-reused");
    assert_eq!(seen.runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_request_in_flight_is_a_409_with_retry_after() {
    let gate = Arc::new(Semaphore::new(0));
    let seen = Arc::new(Seen {
        gate: Some(gate.clone()),
        ..Seen::default()
    });
    let app = app(
        idem_tests::engine_on("http-idempotency-key", "memory:").await,
        seen.clone(),
    );
    let first = tokio::spawn({
        let app = app.clone();
        async move { send(&app, request("POST", "/slow", Some("k-3"), "")).await }
    });
    seen.started.acquire().await.unwrap().forget();
    let second = send(&app, request("POST", "/slow", Some("k-3"), "")).await;
    second.assert_problem(StatusCode::CONFLICT, "request-in-flight");
    // The policy's hint is the whole lease (60 s), which says no more than
    // the lease: the layer's own wait, 1 s by default.
    assert_eq!(second.headers["retry-after"], "1");
    assert_eq!(second.json()["retry_after_s"], 1);
    assert_eq!(second.headers["idempotent-replayed"], "false");
    gate.add_permits(1);
    let first = first.await.unwrap();
    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(first.body, "done");
    let third = send(&app, request("POST", "/slow", Some("k-3"), "")).await;
    assert_eq!(third.headers["idempotent-replayed"], "true");
    assert_eq!(third.body, "done");
    assert_eq!(seen.runs.load(Ordering::SeqCst), 1);
}

/// `/slow` behind a layer whose in-flight wait is `wait`, on a SQLite file
/// whose clock the test holds (the lease left is what the test says), with
/// a 60 s lease: its first request with `key` held in flight, the answer to
/// a second one after `elapsed` of the lease.
async fn in_flight_answer(wait: Option<Duration>, elapsed: Duration) -> Answer {
    let clock = idem::store::ManualClock::new(1_000_000);
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("idem.db").display());
    let options = StoreOptions {
        clock: clock.store_clock(),
        ..StoreOptions::default()
    };
    let store = idem::store::open(&url, options).await.unwrap();
    let engine = Engine::new(
        idem_tests::load("http-idempotency-key"),
        store,
        EngineOptions {
            lease: Some(Duration::from_secs(60)),
            ..EngineOptions::default()
        },
    );
    let gate = Arc::new(Semaphore::new(0));
    let seen = Arc::new(Seen {
        gate: Some(gate.clone()),
        ..Seen::default()
    });
    let mut layer = IdempotencyLayer::new(engine).tenant("shop");
    if let Some(wait) = wait {
        layer = layer.in_flight_retry_after(wait);
    }
    let app = Router::new()
        .route("/slow", post(slow))
        .layer(layer)
        .with_state(seen.clone());
    let first = tokio::spawn({
        let app = app.clone();
        async move { send(&app, request("POST", "/slow", Some("k-11"), "")).await }
    });
    seen.started.acquire().await.unwrap().forget();
    clock.advance(elapsed);
    let answer = send(&app, request("POST", "/slow", Some("k-11"), "")).await;
    answer.assert_problem(StatusCode::CONFLICT, "request-in-flight");
    assert_eq!(answer.headers["idempotent-replayed"], "false");
    gate.add_permits(1);
    assert_eq!(first.await.unwrap().status, StatusCode::OK);
    answer
}

fn retry_after(answer: &Answer) -> u64 {
    let header: u64 = answer.headers["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(answer.json()["retry_after_s"], header);
    header
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_after_for_a_key_in_flight_is_the_layers_wait_not_the_lease() {
    // No wait configured: 1 s, though 50 s of the lease are left.
    let answer = in_flight_answer(None, Duration::from_secs(10)).await;
    assert_eq!(retry_after(&answer), 1);
    // A configured wait, well inside the lease.
    let answer =
        in_flight_answer(Some(Duration::from_millis(4_200)), Duration::from_secs(10)).await;
    assert_eq!(retry_after(&answer), 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_after_for_a_key_in_flight_never_passes_the_lease() {
    // A configured wait of 2 minutes, 7.5 s of the lease left: 8 s (the
    // lease's end, rounded up to the second).
    let answer = in_flight_answer(
        Some(Duration::from_secs(120)),
        Duration::from_millis(52_500),
    )
    .await;
    assert_eq!(retry_after(&answer), 8);
    // The last few milliseconds of the lease: never less than 1 s.
    let answer = in_flight_answer(
        Some(Duration::from_secs(120)),
        Duration::from_millis(59_990),
    )
    .await;
    assert_eq!(retry_after(&answer), 1);
}

#[tokio::test]
async fn every_answer_to_a_request_with_a_key_says_whether_it_is_a_replay() {
    let seen = Arc::new(Seen::default());
    let app = app(
        idem_tests::engine_on("http-idempotency-key", "memory:").await,
        seen.clone(),
    );
    // Refused before anything runs, with a key.
    let long = "k".repeat(300);
    let refused = send(&app, request("POST", "/charges", Some(&long), "")).await;
    refused.assert_problem(StatusCode::BAD_REQUEST, "refused-by-policy");
    assert_eq!(refused.headers["idempotent-replayed"], "false");
    let large = send(
        &app,
        request("POST", "/charges", Some("k-12"), &"x".repeat(2000)),
    )
    .await;
    large.assert_problem(StatusCode::PAYLOAD_TOO_LARGE, "body-too-large");
    assert_eq!(large.headers["idempotent-replayed"], "false");
    // A fresh response, a conflict, then a replay.
    let fresh = send(&app, request("POST", "/charges", Some("k-12"), "1")).await;
    assert_eq!(fresh.status, StatusCode::CREATED);
    assert_eq!(fresh.headers["idempotent-replayed"], "false");
    let reused = send(&app, request("POST", "/charges", Some("k-12"), "2")).await;
    reused.assert_problem(StatusCode::UNPROCESSABLE_ENTITY, "key-reused");
    assert_eq!(reused.headers["idempotent-replayed"], "false");
    let replay = send(&app, request("POST", "/charges", Some("k-12"), "1")).await;
    assert_eq!(replay.headers["idempotent-replayed"], "true");
    // No key: no answer about a key.
    let keyless = send(&app, request("POST", "/charges", None, "1")).await;
    keyless.assert_problem(StatusCode::BAD_REQUEST, "missing-idempotency-key");
    assert!(keyless.headers.get("idempotent-replayed").is_none());
    assert_eq!(seen.runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_client_that_hangs_up_does_not_cancel_the_effect_or_its_record() {
    let gate = Arc::new(Semaphore::new(0));
    let seen = Arc::new(Seen {
        gate: Some(gate.clone()),
        ..Seen::default()
    });
    let app = app(
        idem_tests::engine_on("http-idempotency-key", "memory:").await,
        seen.clone(),
    );
    let first = tokio::spawn({
        let app = app.clone();
        async move { send(&app, request("POST", "/slow", Some("k-4"), "")).await }
    });
    seen.started.acquire().await.unwrap().forget();
    // The client hangs up: the server drops the request's future.
    first.abort();
    assert!(matches!(first.await, Err(e) if e.is_cancelled()));
    gate.add_permits(1);
    // The handler still finishes and its end is recorded: the retry is a
    // replay (409s until then).
    let replay = loop {
        let answer = send(&app, request("POST", "/slow", Some("k-4"), "")).await;
        if answer.status != StatusCode::CONFLICT {
            break answer;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    assert_eq!(replay.status, StatusCode::OK);
    assert_eq!(replay.headers["idempotent-replayed"], "true");
    assert_eq!(replay.body, "done");
    assert_eq!(seen.runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn bodies_past_the_limit_are_a_413_and_nothing_runs() {
    let seen = Arc::new(Seen::default());
    let app = app(
        idem_tests::engine_on("http-idempotency-key", "memory:").await,
        seen.clone(),
    );
    let large = "x".repeat(1025);
    // Without Content-Length: found while reading.
    let answer = send(&app, request("POST", "/charges", Some("k-5"), &large)).await;
    answer.assert_problem(StatusCode::PAYLOAD_TOO_LARGE, "body-too-large");
    assert_eq!(answer.json()["limit_bytes"], 1024);
    // Declared: refused before reading.
    let declared = Request::builder()
        .method("POST")
        .uri("/charges")
        .header("idempotency-key", "k-5")
        .header("content-length", "1000000")
        .body(Body::from(large.clone()))
        .unwrap();
    send(&app, declared)
        .await
        .assert_problem(StatusCode::PAYLOAD_TOO_LARGE, "body-too-large");
    // At the limit it runs.
    let fits = send(
        &app,
        request("POST", "/charges", Some("k-5"), &large[..1024]),
    )
    .await;
    assert_eq!(fits.status, StatusCode::CREATED);
    assert_eq!(seen.runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn server_errors_are_re_executed_and_client_errors_replayed_as_the_policy_says() {
    let seen = Arc::new(Seen::default());
    let app = app(
        idem_tests::engine_on("http-idempotency-key", "memory:").await,
        seen.clone(),
    );
    // 503: recorded failed-retryable; http-idempotency-key re-executes it.
    let first = send(&app, request("POST", "/status", Some("k-6"), "503")).await;
    assert_eq!(
        (first.status, first.body.as_str()),
        (StatusCode::SERVICE_UNAVAILABLE, "run 1")
    );
    let second = send(&app, request("POST", "/status", Some("k-6"), "503")).await;
    assert_eq!(
        (second.status, second.body.as_str()),
        (StatusCode::SERVICE_UNAVAILABLE, "run 2")
    );
    assert_eq!(second.headers["idempotent-replayed"], "false");
    // 402: recorded failed for good; replayed.
    let declined = send(&app, request("POST", "/status", Some("k-7"), "402")).await;
    assert_eq!(
        (declined.status, declined.body.as_str()),
        (StatusCode::PAYMENT_REQUIRED, "run 3")
    );
    let replayed = send(&app, request("POST", "/status", Some("k-7"), "402")).await;
    assert_eq!(
        (replayed.status, replayed.body.as_str()),
        (StatusCode::PAYMENT_REQUIRED, "run 3")
    );
    assert_eq!(replayed.headers["idempotent-replayed"], "true");
    assert_eq!(seen.runs.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn a_response_too_large_to_keep_replays_its_status_and_says_why() {
    let seen = Arc::new(Seen::default());
    let app = app(
        idem_tests::engine_on("http-idempotency-key", "memory:").await,
        seen.clone(),
    );
    let first = send(&app, request("POST", "/big", Some("k-8"), "")).await;
    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(first.body.len(), 100_000);
    let again = send(&app, request("POST", "/big", Some("k-8"), "")).await;
    assert_eq!(again.status, StatusCode::OK);
    assert_eq!(again.headers["idempotent-replayed"], "true");
    assert_eq!(again.headers["content-type"], "application/problem+json");
    let json = again.json();
    assert_eq!(
        json["type"],
        format!("{}response-not-kept", idem_http::problem::TYPE_PREFIX)
    );
    assert_eq!(json["status"], 200);
    assert!(
        json["detail"].as_str().unwrap().contains("100000 bytes"),
        "{json}"
    );
    assert_eq!(seen.runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn methods_outside_the_list_pass_straight_through() {
    let seen = Arc::new(Seen::default());
    let app = app(
        idem_tests::engine_on("http-idempotency-key", "memory:").await,
        seen.clone(),
    );
    for n in 1..=2 {
        let answer = send(&app, request("GET", "/read", Some("k-9"), "")).await;
        assert_eq!(answer.body, format!("read {n}"));
        assert!(answer.headers.get("idempotent-replayed").is_none());
    }
}

#[tokio::test]
async fn the_tenant_can_come_from_a_header() {
    let seen = Arc::new(Seen::default());
    let app = Router::new()
        .route("/charges", post(charge))
        .layer(
            IdempotencyLayer::new(idem_tests::engine_on("http-idempotency-key", "memory:").await)
                .tenant_header("x-tenant".parse().unwrap()),
        )
        .with_state(seen.clone());
    let missing = send(&app, request("POST", "/charges", Some("k-10"), "1")).await;
    missing.assert_problem(StatusCode::BAD_REQUEST, "invalid-header");
    assert_eq!(missing.json()["header"], "x-tenant");
    for tenant in ["a", "b", "a"] {
        let mut req = request("POST", "/charges", Some("k-10"), "1");
        req.headers_mut()
            .insert("x-tenant", tenant.parse().unwrap());
        send(&app, req).await;
    }
    // The same client key under two tenants is two requests.
    assert_eq!(seen.runs.load(Ordering::SeqCst), 2);
}
