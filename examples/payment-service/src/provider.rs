//! A fake payment provider that behaves as a careful real one does: it
//! deduplicates by the `Idempotency-Key` it is handed (a repeated key gets
//! the first charge's receipt, never a second charge) and refuses a fence
//! lower than one it has seen for the key (a deposed holder's late call).
//!
//! `POST /v1/charges` (headers `Idempotency-Key`, `Idem-Fence`; a JSON body)
//! charges; `GET /v1/charges` lists every request count and charge, which is
//! how the tests count what really happened.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{Value, json};

/// The fence header a holder sends with its key.
pub const FENCE_HEADER: &str = "idem-fence";

#[derive(Default)]
struct Ledger {
    /// Every POST received, charged or not.
    requests: u64,
    /// Requests still waiting out the delay.
    in_flight: u64,
    /// Per key: the highest fence seen and the charge made.
    keys: HashMap<String, (u64, Option<Value>)>,
    /// Every charge, in order.
    charges: Vec<Value>,
}

#[derive(Clone)]
struct Provider {
    ledger: Arc<Mutex<Ledger>>,
    delay: Duration,
}

/// Binds `listen`, prints `provider listening on http://ADDR` and serves
/// until killed.
pub async fn serve(listen: SocketAddr, delay: Duration) -> Result<(), String> {
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| format!("cannot listen on {listen}: {e}"))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    println!("provider listening on http://{addr}");
    axum::serve(listener, router(delay))
        .await
        .map_err(|e| format!("the provider stopped: {e}"))
}

/// Starts a provider in this process on a free loopback port.
pub async fn spawn(delay: Duration) -> Result<SocketAddr, String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| format!("cannot start the in-process provider: {e}"))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    tokio::spawn(async move { axum::serve(listener, router(delay)).await });
    Ok(addr)
}

fn router(delay: Duration) -> Router {
    let provider = Provider {
        ledger: Arc::default(),
        delay,
    };
    Router::new()
        .route("/v1/charges", post(charge).get(list))
        .with_state(provider)
}

async fn charge(
    State(provider): State<Provider>,
    headers: HeaderMap,
    Json(request): Json<Value>,
) -> (StatusCode, Json<Value>) {
    let key = headers.get("idempotency-key").and_then(|v| v.to_str().ok());
    let fence = headers
        .get(FENCE_HEADER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let (Some(key), Some(fence)) = (key, fence) else {
        let error = "an Idempotency-Key header and a numeric Idem-Fence header are required";
        return (StatusCode::BAD_REQUEST, Json(json!({ "error": error })));
    };
    let answer = {
        let mut ledger = provider.ledger.lock().expect("ledger lock");
        ledger.requests += 1;
        let next_id = ledger.charges.len() + 1;
        let entry = ledger.keys.entry(key.to_string()).or_insert((0, None));
        if fence < entry.0 {
            let error = format!(
                "stale fence {fence}: fence {} was seen for this key",
                entry.0
            );
            return (StatusCode::CONFLICT, Json(json!({ "error": error })));
        }
        entry.0 = fence;
        if let Some(receipt) = &entry.1 {
            return (
                StatusCode::OK,
                Json(json!({ "replayed": true, "charge": receipt })),
            );
        }
        let receipt = json!({
            "id": format!("ch_{next_id}"),
            "key": key,
            "fence": fence,
            "request": request,
        });
        entry.1 = Some(receipt.clone());
        ledger.charges.push(receipt.clone());
        ledger.in_flight += 1;
        receipt
    };
    // The charge is made; the answer takes a while (a slow network, a slow
    // bank). A caller killed meanwhile never learns of it.
    tokio::time::sleep(provider.delay).await;
    provider.ledger.lock().expect("ledger lock").in_flight -= 1;
    (
        StatusCode::OK,
        Json(json!({ "replayed": false, "charge": answer })),
    )
}

async fn list(State(provider): State<Provider>) -> Json<Value> {
    let ledger = provider.ledger.lock().expect("ledger lock");
    Json(json!({
        "requests": ledger.requests,
        "in_flight": ledger.in_flight,
        "charges": ledger.charges,
    }))
}
