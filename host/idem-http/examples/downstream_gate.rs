//! The gate a downstream keeps, in front of an axum router.
//!
//! ```text
//! cargo run -p idem-http --example downstream_gate -- [STORE_URL]
//! ```
//!
//! The downstream (a provider's `POST /v1/charges`) keeps idem's gate in
//! STORE_URL (`sqlite:PATH`, `postgres://…`; `memory:` by default). The
//! example serves it on a free port and sends itself what two holders of
//! one key send after a take-over: the first holder's call (fence 1), the
//! successor's (fence 2), and the first holder's late retry (fence 1). The
//! charge is made once; the successor gets it replayed; the late retry is
//! refused. No policy is needed: the gate only reads the key and fence
//! headers idem's holders send.

use axum::routing::post;
use axum::{Extension, Json, Router};
use bytes::Bytes;
use http::StatusCode;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use idem::store::StoreOptions;
use idem_http::{GateAdmission, GateLayer, IDEM_FENCE, IDEMPOTENCY_KEY, IDEMPOTENT_REPLAYED};
use serde_json::{Value, json};

/// `POST /v1/charges`: the downstream's write, with no deduplication of
/// its own. Runs only when the gate admits the call.
async fn charge(
    Extension(admission): Extension<GateAdmission>,
    Json(request): Json<Value>,
) -> (StatusCode, Json<Value>) {
    println!(
        "  downstream: charging {request} under key {} at fence {}",
        admission.key, admission.fence
    );
    let receipt = json!({"charge": "ch_1", "fence": admission.fence, "amount": request["amount"]});
    (StatusCode::CREATED, Json(receipt))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "memory:".to_string());
    let store = idem::store::open(&url, StoreOptions::default()).await?;
    let app = Router::new()
        .route("/v1/charges", post(charge))
        .layer(GateLayer::new(&store).gate("charges"));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    println!("listening on http://{addr}");
    tokio::spawn(async move { axum::serve(listener, app).await });

    let client = Client::builder(TokioExecutor::new()).build_http();
    // The key and fence as idem hands them to a holder (`FencedKey`,
    // `IDEM_KEY`/`IDEM_FENCE`).
    let key = "5e1f0c9ad6b04e3f8a7c2b1d0e9f8a7b6c5d4e3f2a1b0c9d8e7f6a5b4c3d2e1f";
    let calls = [
        ("the holder (fence 1)", "1"),
        ("its successor after a take-over (fence 2)", "2"),
        ("the first holder, late (fence 1)", "1"),
    ];
    for (who, fence) in calls {
        let request = http::Request::post(format!("http://{addr}/v1/charges"))
            .header("content-type", "application/json")
            .header(IDEMPOTENCY_KEY, key)
            .header(IDEM_FENCE, fence)
            .body(Full::new(Bytes::from(r#"{"amount":"19.99 EUR"}"#)))?;
        let response = client.request(request).await?;
        let status = response.status();
        let replayed = response
            .headers()
            .get(IDEMPOTENT_REPLAYED)
            .map_or("(none)".to_string(), |v| {
                v.to_str().unwrap_or("?").to_string()
            });
        let body = response.into_body().collect().await?.to_bytes();
        println!(
            "{who}: {status}, Idempotent-Replayed: {replayed}, body {}",
            String::from_utf8_lossy(&body)
        );
    }
    Ok(())
}
