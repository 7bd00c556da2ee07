//! What a client of the layer sees when the service crashes mid-request,
//! answer by answer, as `docs/guide/through-a-crash.md` quotes them: in
//! flight (`409`, `Retry-After`), the first retry after the lease
//! (`409 needs-review`), every later one (`409 rejected`), and what each
//! of the service's own settlements (`forensics::review::resolve`) gives
//! the next retry. On a SQLite file and PostgreSQL, with the store's clock
//! in the test's hand (the lease runs out when the test says so).

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Request, StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::post;
use axum::{Extension, Router};
use http_body_util::BodyExt;
use idem::engine::{Engine, EngineOptions};
use idem::forensics::ShownOperation;
use idem::forensics::review::{resolve, waiting_for_review};
use idem::store::{
    Holder, ManualClock, RecordKey, Resolution, ResolveRequest, Store, StoreOptions,
};
use idem_http::{FencedKey, IdempotencyLayer};
use idem_tests::{TestStore, postgres_url};
use serde_json::{Value, json};
use tokio::sync::Semaphore;
use tower::ServiceExt;

/// The claim's lease in these tests.
const LEASE: Duration = Duration::from_secs(30);

/// The service: how often its handler ran, and each run's claim.
struct Charges {
    runs: AtomicU32,
    claims: std::sync::Mutex<Vec<FencedKey>>,
    /// A permit for each first attempt that started (and never ends).
    started: Semaphore,
}

impl Default for Charges {
    fn default() -> Self {
        Charges {
            runs: AtomicU32::new(0),
            claims: Default::default(),
            started: Semaphore::new(0),
        }
    }
}

/// `POST /charges`: a key's first attempt never ends (the crash cuts it);
/// a later one charges.
async fn charge(
    State(charges): State<Arc<Charges>>,
    Extension(claim): Extension<FencedKey>,
) -> impl IntoResponse {
    let n = charges.runs.fetch_add(1, Ordering::SeqCst) + 1;
    let first_attempt = claim.attempt == 1;
    charges.claims.lock().unwrap().push(claim);
    if first_attempt {
        charges.started.add_permits(1);
        std::future::pending::<()>().await;
    }
    (
        StatusCode::CREATED,
        [(header::CONTENT_TYPE, "application/json")],
        format!(r#"{{"charge":"ch_{n}"}}"#),
    )
}

struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    body: String,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|v| v.to_str().unwrap())
    }
}

fn request(key: &str) -> Request<Body> {
    Request::post("/charges")
        .header("idempotency-key", key)
        .body(Body::from(r#"{"amount":"100 EUR"}"#))
        .unwrap()
}

async fn send(app: &Router, key: &str) -> Answer {
    let response = app.clone().oneshot(request(key)).await.unwrap();
    let (parts, body) = response.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    Answer {
        status: parts.status,
        headers: parts.headers,
        body: String::from_utf8(body.to_vec()).unwrap(),
    }
}

/// A problem's whole body: what the page quotes.
fn problem(slug: &str, title: &str, status: u16, detail: &str) -> Value {
    json!({
        "type": format!("{}{slug}", idem_http::problem::TYPE_PREFIX),
        "title": title,
        "status": status,
        "detail": detail,
    })
}

/// The service crashes while `key`'s first request runs: the request's
/// future is never polled again nor dropped, which is what the store sees
/// of a process that died under it (no heartbeat, no end recorded).
async fn crash_mid_request(app: &Router, charges: &Charges, key: &str) {
    let mut first = Box::pin(send(app, key));
    tokio::select! {
        _ = &mut first => panic!("the first request cannot end"),
        permit = charges.started.acquire() => permit.unwrap().forget(),
    }
    std::mem::forget(first);
}

/// The record waiting for review for the client's `key`, as the service's
/// own settling code finds it: by the operation the record kept.
async fn waiting_for(store: &Store, key: &str) -> (RecordKey, u64) {
    let (waiting, _) = waiting_for_review(store, Some("http"), 100).await.unwrap();
    let found = waiting
        .iter()
        .find(|w| {
            matches!(&w.operation, ShownOperation::Kept { fields, .. }
                if fields.get("idempotency_key").map(String::as_str) == Some(key))
        })
        .unwrap_or_else(|| panic!("{key} waits for review"));
    (found.view.record.key.clone(), found.view.record.fence)
}

async fn settle(store: &Store, key: &str, resolution: Resolution) {
    let (record, fence) = waiting_for(store, key).await;
    resolve(
        store,
        ResolveRequest {
            key: record,
            observed_fence: fence,
            resolution,
            by: "billing-service".into(),
            reason: "looked the key up at the provider".into(),
            holder: Holder::this_process(),
        },
    )
    .await
    .unwrap();
}

/// Crashes `key`'s first request, then walks its retries through the lease
/// and review: in flight, needs review, rejected.
async fn crash_and_wait_for_review(
    app: &Router,
    charges: &Charges,
    clock: &ManualClock,
    key: &str,
) {
    crash_mid_request(app, charges, key).await;

    // Before the lease runs out: in flight, come back in a second.
    let in_flight = send(app, key).await;
    assert_eq!(in_flight.status, StatusCode::CONFLICT);
    assert_eq!(
        in_flight.header("content-type"),
        Some("application/problem+json")
    );
    assert_eq!(in_flight.header("retry-after"), Some("1"));
    assert_eq!(in_flight.header("idempotent-replayed"), Some("false"));
    let mut expected = problem(
        "request-in-flight",
        "A request with this Idempotency-Key is still being processed",
        409,
        "a request with this Idempotency-Key is in flight",
    );
    expected["retry_after_s"] = json!(1);
    assert_eq!(in_flight.json(), expected);

    // The lease runs out with nothing recorded: the first retry after it
    // sends the record to review...
    clock.advance(LEASE + Duration::from_millis(1));
    let needs_review = send(app, key).await;
    assert_eq!(needs_review.status, StatusCode::CONFLICT);
    assert_eq!(needs_review.header("retry-after"), None);
    assert_eq!(needs_review.header("idempotent-replayed"), Some("false"));
    assert_eq!(
        needs_review.json(),
        problem(
            "needs-review",
            "An earlier attempt's outcome is unknown and needs review",
            409,
            "the previous holder's lease expired before it finished; the outcome needs review",
        )
    );

    // ...and every later one is rejected until it is settled.
    for _ in 0..2 {
        let rejected = send(app, key).await;
        assert_eq!(rejected.status, StatusCode::CONFLICT);
        assert_eq!(rejected.header("retry-after"), None);
        assert_eq!(rejected.header("idempotent-replayed"), Some("false"));
        assert_eq!(
            rejected.json(),
            problem(
                "rejected",
                "The policy rejected this duplicate request",
                409,
                "the outcome of an earlier attempt is unknown and needs review",
            )
        );
    }
}

async fn through_a_crash(place: &TestStore) {
    let clock = ManualClock::new(1_000_000);
    let options = StoreOptions {
        clock: clock.store_clock(),
        ..StoreOptions::default()
    };
    let store = idem::store::open(&place.store, options).await.unwrap();
    let engine = Engine::new(
        idem_tests::load("http-idempotency-key"),
        store.clone(),
        EngineOptions {
            lease: Some(LEASE),
            ..EngineOptions::default()
        },
    );
    let charges = Arc::new(Charges::default());
    let app = Router::new()
        .route("/charges", post(charge))
        .layer(IdempotencyLayer::new(engine.clone()).tenant("shop"))
        .with_state(charges.clone());

    // Settled as completed, with the response the handler would have
    // given: the next retry is its replay.
    crash_and_wait_for_review(&app, &charges, &clock, "order-1").await;
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    let receipt = idem_http::stored_outcome(
        StatusCode::CREATED,
        &headers,
        br#"{"charge":"ch_at_provider"}"#,
    );
    settle(&store, "order-1", Resolution::Completed(receipt)).await;
    let replay = send(&app, "order-1").await;
    assert_eq!(replay.status, StatusCode::CREATED);
    assert_eq!(replay.header("content-type"), Some("application/json"));
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    assert_eq!(replay.body, r#"{"charge":"ch_at_provider"}"#);
    assert_eq!(charges.runs.load(Ordering::SeqCst), 1);

    // Released (nothing happened at the provider): the next retry runs the
    // handler again, as a take-over under a higher fence.
    crash_and_wait_for_review(&app, &charges, &clock, "order-2").await;
    settle(&store, "order-2", Resolution::Release).await;
    let again = send(&app, "order-2").await;
    assert_eq!(again.status, StatusCode::CREATED);
    assert_eq!(again.header("idempotent-replayed"), Some("false"));
    assert_eq!(again.body, r#"{"charge":"ch_3"}"#);
    {
        let claims = charges.claims.lock().unwrap();
        let (crashed, rerun) = (&claims[1], &claims[2]);
        assert_eq!((crashed.attempt, crashed.take_over), (1, false));
        assert_eq!((rerun.attempt, rerun.take_over), (2, true));
        assert!(rerun.fence > crashed.fence);
        assert_eq!(rerun.key, crashed.key);
    }
    let replay = send(&app, "order-2").await;
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    assert_eq!(replay.body, again.body);

    // Rejected for good, with an HTTP status: every retry gets that status
    // and a problem saying so; the handler never runs again.
    crash_and_wait_for_review(&app, &charges, &clock, "order-3").await;
    settle(&store, "order-3", Resolution::Reject { status: 402 }).await;
    for _ in 0..2 {
        let refused = send(&app, "order-3").await;
        assert_eq!(refused.status, StatusCode::PAYMENT_REQUIRED);
        assert_eq!(
            refused.header("content-type"),
            Some("application/problem+json")
        );
        assert_eq!(refused.header("idempotent-replayed"), Some("true"));
        assert_eq!(
            refused.json(),
            problem(
                "rejected-for-good",
                "The request was rejected for good",
                402,
                "an earlier attempt under this key ended without a response to replay (a settlement that rejected it stores none): it was rejected for good, and will not run again",
            )
        );
    }
    assert_eq!(charges.runs.load(Ordering::SeqCst), 4);
    engine.flush_log().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_is_in_flight_then_needs_review_then_rejected_until_settled_on_sqlite() {
    through_a_crash(&TestStore::sqlite()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_is_in_flight_then_needs_review_then_rejected_until_settled_on_postgres() {
    let Some(url) = postgres_url(
        "a_crash_is_in_flight_then_needs_review_then_rejected_until_settled_on_postgres",
    ) else {
        return;
    };
    through_a_crash(&TestStore::postgres(&url)).await;
}
