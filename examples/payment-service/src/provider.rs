//! A fake payment provider that behaves as a careful real one does, with
//! idem's gate in front of its charges (`idem_http::GateLayer`): a repeated
//! key gets the first charge's response replayed, never a second charge; a
//! fence lower than one seen for the key (a deposed holder's late call) is
//! refused; a call while the key's first charge is still being made is
//! told to come back. The provider's own handler holds no deduplication
//! code: the gate is what makes `provider-charge`'s take-over safe.
//!
//! `POST /v1/charges` (headers `Idempotency-Key`, `Idem-Fence`; a JSON body)
//! charges; `GET /v1/charges` lists every request count and charge, which is
//! how the tests count what really happened. The gate keeps its entries in
//! the store `--gate-store` names (`memory:` by default).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::post;
use axum::{Extension, Json, Router};
use idem::store::{Store, StoreOptions};
use idem_http::{GateAdmission, GateLayer};
use serde_json::{Value, json};

/// The fence header a holder sends with its key.
pub const FENCE_HEADER: &str = idem_http::IDEM_FENCE;

#[derive(Default)]
struct Ledger {
    /// Every POST received, charged or not (counted before the gate).
    requests: u64,
    /// Charges still waiting out the delay.
    in_flight: u64,
    /// Every charge, in order.
    charges: Vec<Value>,
}

#[derive(Clone)]
struct Provider {
    ledger: Arc<Mutex<Ledger>>,
    delay: Duration,
}

/// Opens the gate's store (`memory:`, `sqlite:PATH` or a PostgreSQL URL).
pub async fn gate_store(url: &str) -> Result<Store, String> {
    idem::store::open(url, StoreOptions::default())
        .await
        .map_err(|e| format!("cannot open the provider's gate store {url}: {e}"))
}

/// Binds `listen`, prints `provider listening on http://ADDR` and serves
/// until killed.
pub async fn serve(listen: SocketAddr, delay: Duration, store: Store) -> Result<(), String> {
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| format!("cannot listen on {listen}: {e}"))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    println!("provider listening on http://{addr}");
    axum::serve(listener, router(delay, &store))
        .await
        .map_err(|e| format!("the provider stopped: {e}"))
}

/// Starts a provider in this process on a free loopback port, its gate in
/// memory.
pub async fn spawn(delay: Duration) -> Result<SocketAddr, String> {
    let store = gate_store("memory:").await?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| format!("cannot start the in-process provider: {e}"))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let app = router(delay, &store);
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(addr)
}

fn router(delay: Duration, store: &Store) -> Router {
    let provider = Provider {
        ledger: Arc::default(),
        delay,
    };
    Router::new()
        .route("/v1/charges", post(charge).get(list))
        // The gate: a window longer than any charge's delay, extended while
        // a charge is made anyway.
        .layer(GateLayer::new(store).gate("charges"))
        .layer(middleware::from_fn_with_state(provider.clone(), count))
        .with_state(provider)
}

/// Counts every POST, before the gate answers it.
async fn count(State(provider): State<Provider>, request: Request, next: Next) -> Response {
    if request.method() == Method::POST {
        provider.ledger.lock().expect("ledger lock").requests += 1;
    }
    next.run(request).await
}

/// A charge the gate admitted: made once, under the holder's key and fence.
async fn charge(
    State(provider): State<Provider>,
    Extension(admission): Extension<GateAdmission>,
    Json(request): Json<Value>,
) -> (StatusCode, Json<Value>) {
    let receipt = {
        let mut ledger = provider.ledger.lock().expect("ledger lock");
        let receipt = json!({
            "id": format!("ch_{}", ledger.charges.len() + 1),
            "key": admission.key,
            "fence": admission.fence,
            "request": request,
        });
        ledger.charges.push(receipt.clone());
        ledger.in_flight += 1;
        receipt
    };
    // The charge is made; the answer takes a while (a slow network, a slow
    // bank). A caller killed meanwhile never learns of it; the gate stores
    // the answer once it is given, for the caller's successor.
    tokio::time::sleep(provider.delay).await;
    provider.ledger.lock().expect("ledger lock").in_flight -= 1;
    (
        StatusCode::OK,
        Json(json!({ "replayed": false, "charge": receipt })),
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
