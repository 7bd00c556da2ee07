//! What a client of the `Idempotency-Key` layer sees when the service
//! crashes mid-request, and how the service settles the record itself.
//!
//! ```text
//! cargo run -p idem-http --example settle_after_a_crash -- POLICY.wasm [STORE_URL]
//! ```
//!
//! POLICY is the `http-idempotency-key` component (`cargo xtask build` writes
//! it to `target/policies/http-idempotency-key.wasm`; without the argument,
//! the path in `IDEM_EXAMPLE_POLICY`). STORE_URL is any store URL,
//! `memory:` by default. The claim's lease is shortened to 2 s, so the
//! whole timeline takes about as long: the first request's handler starts
//! and the service "crashes"; the client's retries are told the request is
//! in flight, then (past the lease) that it needs review, then that it is
//! rejected; the service finds the record waiting for review, settles it
//! as completed with the receipt its provider shows, and the next retry is
//! that receipt, replayed. `docs/guide/through-a-crash.md` walks through it.

use std::path::PathBuf;
use std::time::Duration;

use axum::body::Body;
use axum::response::IntoResponse;
use axum::routing::post;
use axum::{Extension, Router};
use http::{HeaderMap, HeaderValue, Request, StatusCode, header};
use http_body_util::BodyExt;
use idem::engine::{Engine, EngineOptions};
use idem::forensics::ShownOperation;
use idem::forensics::review::{resolve, waiting_for_review};
use idem::policy::{PolicyRuntime, RuntimeConfig};
use idem::store::{Holder, Resolution, ResolveRequest, Store, StoreOptions};
use idem_http::{FencedKey, IdempotencyLayer};
use tokio::sync::mpsc;
use tower::ServiceExt;

/// The client's key for the charge that the crash cuts.
const KEY: &str = "order-1001";

/// `POST /charges`. Its first run tells `main` it started and never ends:
/// the process "dies" under it.
async fn charge(
    Extension(claim): Extension<FencedKey>,
    Extension(started): Extension<mpsc::UnboundedSender<()>>,
) -> impl IntoResponse {
    println!(
        "  handler: charging under key {}… at fence {}",
        &claim.key[..12],
        claim.fence
    );
    let _ = started.send(());
    std::future::pending::<()>().await;
    StatusCode::CREATED
}

/// One request from the client, and the answer it got, printed.
async fn retry(app: &Router, what: &str) -> Result<(), Box<dyn std::error::Error>> {
    let request = Request::post("/charges")
        .header("idempotency-key", KEY)
        .body(Body::from(r#"{"amount":"100 EUR"}"#))?;
    let response = app.clone().oneshot(request).await?;
    let status = response.status();
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .map_or("(none)".to_string(), |v| {
                v.to_str().unwrap_or("(not text)").to_string()
            })
    };
    let (retry_after, replayed) = (header("retry-after"), header("idempotent-replayed"));
    let body = response.into_body().collect().await?.to_bytes();
    println!(
        "{what}: {status}, Retry-After: {retry_after}, Idempotent-Replayed: {replayed}\n  {}",
        String::from_utf8_lossy(&body)
    );
    Ok(())
}

/// What the service's own settling code does once it knows the charge went
/// through (it asked its payment provider for the key): finds the record
/// waiting for review by the client's key, and settles it as completed
/// with the response the handler would have given.
async fn settle_as_charged(store: &Store) -> Result<(), Box<dyn std::error::Error>> {
    let (waiting, _) = waiting_for_review(store, Some("http"), 100).await?;
    let found = waiting
        .iter()
        .find(|w| {
            matches!(&w.operation, ShownOperation::Kept { fields, .. }
                if fields.get("idempotency_key").map(String::as_str) == Some(KEY))
        })
        .ok_or("the crashed request's record waits for review")?;
    println!(
        "the service finds {} (fence {}) waiting: {}",
        found.view.record.key, found.view.record.fence, found.why
    );
    // The response as the layer stores one: what every later retry gets.
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    let receipt =
        idem_http::stored_outcome(StatusCode::CREATED, &headers, br#"{"charge":"ch_1001"}"#);
    let settled = resolve(
        store,
        ResolveRequest {
            key: found.view.record.key.clone(),
            // The fence it saw: if the record moved on meanwhile, nothing
            // changes and `resolve` says so.
            observed_fence: found.view.record.fence,
            resolution: Resolution::Completed(receipt),
            by: "billing-service".into(),
            reason: "the provider shows charge ch_1001 under this key".into(),
            holder: Holder::this_process(),
        },
    )
    .await?;
    println!(
        "the service settles it: {} at fence {}",
        settled.record.state.as_str(),
        settled.record.fence
    );
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let policy = args
        .next()
        .or_else(|| std::env::var("IDEM_EXAMPLE_POLICY").ok())
        .map(PathBuf::from)
        .ok_or(
            "usage: settle_after_a_crash POLICY.wasm [STORE_URL] (or set IDEM_EXAMPLE_POLICY)",
        )?;
    let url = args.next().unwrap_or_else(|| "memory:".into());

    let policy = PolicyRuntime::new(RuntimeConfig::default())?.load_file(&policy)?;
    let store = idem::store::open(&url, StoreOptions::default()).await?;
    let lease = Duration::from_secs(2);
    let options = EngineOptions {
        lease: Some(lease),
        ..EngineOptions::default()
    };
    let engine = Engine::new(policy, store.clone(), options);
    let (started, mut started_rx) = mpsc::unbounded_channel::<()>();
    let app = Router::new()
        .route("/charges", post(charge))
        .layer(IdempotencyLayer::new(engine.clone()).tenant("shop"))
        .layer(Extension(started));

    // The first request: its handler starts, and the service crashes. In
    // one process, the request's future is never polled again nor dropped:
    // what the store sees of a process that died under it (no heartbeat,
    // no end recorded). Its client gets no answer.
    let request = Request::post("/charges")
        .header("idempotency-key", KEY)
        .body(Body::from(r#"{"amount":"100 EUR"}"#))?;
    let mut first = Box::pin(app.clone().oneshot(request));
    tokio::select! {
        _ = &mut first => return Err("the first request cannot end".into()),
        _ = started_rx.recv() => {}
    }
    std::mem::forget(first);
    println!("request #1: the service crashed mid-charge; no answer");

    retry(&app, "retry within the lease").await?;
    tokio::time::sleep(lease + Duration::from_millis(200)).await;
    retry(&app, "first retry past the lease").await?;
    retry(&app, "next retry").await?;
    settle_as_charged(engine.store()).await?;
    retry(&app, "retry after settling").await?;
    // Answers to duplicates reach the attempt log in batches: flush them
    // before the process exits.
    engine.flush_log().await;
    Ok(())
}
