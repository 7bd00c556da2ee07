//! The `Idempotency-Key` layer in front of an axum router.
//!
//! ```text
//! cargo run -p idem-http --example axum_router -- POLICY.wasm [STORE_URL]
//! ```
//!
//! POLICY is the `http-idempotency-key` component (`cargo xtask build` writes
//! it to `target/policies/http-idempotency-key.wasm`; without the argument,
//! the path in `IDEM_EXAMPLE_POLICY`). STORE_URL is any store URL
//! (`sqlite:PATH`, `postgres://…`), `memory:` by default. The example serves
//! `POST /charges` on a free port, sends itself the same request twice with
//! one `Idempotency-Key`, prints both answers and exits.

use std::path::PathBuf;

use axum::response::IntoResponse;
use axum::routing::post;
use axum::{Extension, Json, Router};
use bytes::Bytes;
use http::StatusCode;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use idem::engine::{Engine, EngineOptions};
use idem::policy::{PolicyRuntime, RuntimeConfig};
use idem::store::StoreOptions;
use idem_http::{FencedKey, IDEMPOTENT_REPLAYED, IdempotencyLayer};
use serde_json::json;

/// `POST /charges`: runs once per key. The layer hands it the claim: pass
/// `key` and `fence` to whatever performs the effect.
async fn charge(Extension(claim): Extension<FencedKey>, body: String) -> impl IntoResponse {
    println!(
        "  handler: charging {body} under key {} at fence {}",
        claim.key, claim.fence
    );
    let receipt = json!({"charge": format!("ch_{}", &claim.key[..8]), "fence": claim.fence});
    // 2xx is recorded completed: a retry gets this status, its
    // content-type and body again.
    (StatusCode::CREATED, Json(receipt))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let policy = args
        .next()
        .or_else(|| std::env::var("IDEM_EXAMPLE_POLICY").ok())
        .map(PathBuf::from)
        .ok_or("usage: axum_router POLICY.wasm [STORE_URL] (or set IDEM_EXAMPLE_POLICY)")?;
    let url = args.next().unwrap_or_else(|| "memory:".into());

    let policy = PolicyRuntime::new(RuntimeConfig::default())?.load_file(&policy)?;
    let store = idem::store::open(&url, StoreOptions::default()).await?;
    let engine = Engine::new(policy, store, EngineOptions::default());

    // POST and PATCH requests go through the policy; every key is scoped
    // to the tenant "shop".
    let app = Router::new()
        .route("/charges", post(charge))
        .layer(IdempotencyLayer::new(engine.clone()).tenant("shop"));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    println!("listening on http://{addr}");
    tokio::spawn(async move { axum::serve(listener, app).await });

    // A client retrying the same request: one key, the same body.
    const BODY: &[u8] = br#"{"customer":"c1","amount":"100"}"#;
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    for attempt in 1..=2 {
        let request = http::Request::post(format!("http://{addr}/charges"))
            .header("idempotency-key", "order-1001")
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from_static(BODY)))?;
        let response = client.request(request).await?;
        let status = response.status();
        let replayed = match response.headers().get(IDEMPOTENT_REPLAYED) {
            Some(value) => value.to_str()?.to_string(),
            None => "(none)".to_string(),
        };
        let body = response.into_body().collect().await?.to_bytes();
        println!(
            "request #{attempt}: {status}, Idempotent-Replayed: {replayed}, body {}",
            String::from_utf8_lossy(&body)
        );
    }
    // Answers to duplicates reach the attempt log in batches: flush them
    // before the process exits.
    engine.flush_log().await;
    Ok(())
}
