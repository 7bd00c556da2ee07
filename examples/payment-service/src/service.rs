//! The service: `POST /charges` behind the idem HTTP layer.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Extension, Json, Router};
use idem::engine::{Engine, EngineOptions};
use idem::store::StoreOptions;
use idem_http::{FencedKey, IdempotencyLayer};
use serde_json::{Value, json};

use crate::StoreArgs;
use crate::client::{Charged, ProviderClient};

/// Flags of `payment-service serve`.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// The policy requests go through.
    #[arg(long, default_value = "target/policies/http-idempotency-key.wasm")]
    policy: PathBuf,
    /// Where to listen (port 0: any free port; the address is printed).
    #[arg(long, default_value = "127.0.0.1:4000")]
    listen: SocketAddr,
    /// The payment provider's base URL; without it, a fake provider starts
    /// in this process.
    #[arg(long)]
    provider: Option<String>,
    /// Overrides the policy's lease (60 s for http-idempotency-key): how
    /// long a request's claim holds without a heartbeat, e.g. after a crash.
    #[arg(long, value_parser = humantime::parse_duration)]
    lease: Option<Duration>,
    /// The tenant every request belongs to (the key's scope).
    #[arg(long, default_value = "shop")]
    tenant: String,
}

/// Opens the policy and store, binds, prints `listening on http://ADDR`
/// and serves until Ctrl-C, letting requests in flight finish.
pub async fn serve(args: ServeArgs) -> Result<(), String> {
    let policy = crate::load_policy(&args.policy)?;
    let store = idem::store::open(&args.store.store, StoreOptions::default())
        .await
        .map_err(|e| format!("cannot open the store {}: {e}", args.store.store))?;
    let options = EngineOptions {
        lease: args.lease,
        ..EngineOptions::default()
    };
    let engine = Engine::new(policy, store, options);
    let provider = match args.provider {
        Some(url) => url,
        None => {
            let addr = crate::provider::spawn(Duration::ZERO).await?;
            println!("fake provider (in process) on http://{addr}");
            format!("http://{addr}")
        }
    };
    let app = Router::new()
        .route("/charges", post(charge))
        .layer(IdempotencyLayer::new(engine).tenant(args.tenant))
        .with_state(ProviderClient::new(&provider));
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", args.listen))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    println!("listening on http://{addr}");
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await
        .map_err(|e| format!("the service stopped: {e}"))
}

/// `POST /charges` with `{"customer": …, "amount": …, "currency": …}`:
/// charges at the provider under the request's key and fence.
async fn charge(
    State(provider): State<ProviderClient>,
    Extension(claim): Extension<FencedKey>,
    body: axum::body::Bytes,
) -> Response {
    let request: Value = match serde_json::from_slice(&body) {
        Ok(value @ Value::Object(_)) => value,
        _ => return error(StatusCode::BAD_REQUEST, "the body must be a JSON object"),
    };
    for field in ["customer", "amount", "currency"] {
        if request.get(field).is_none_or(Value::is_null) {
            return error(
                StatusCode::BAD_REQUEST,
                &format!("the body has no `{field}`"),
            );
        }
    }
    match provider.charge(&claim.key, claim.fence, &request).await {
        Charged::Receipt(receipt) => {
            let id = receipt["id"].as_str().unwrap_or("unknown").to_string();
            let body = json!({
                "id": id,
                "customer": request["customer"],
                "amount": request["amount"],
                "currency": request["currency"],
                "fence": claim.fence,
            });
            let location = format!("/charges/{id}");
            (
                StatusCode::CREATED,
                [(header::LOCATION, location)],
                Json(body),
            )
                .into_response()
        }
        // A stale fence: this attempt was deposed; another holds the key.
        Charged::Stale(answer) => error(StatusCode::CONFLICT, &answer["detail"].to_string()),
        // Another holder's charge is still being made under the key: this
        // attempt charged nothing; a retry gets that charge, replayed by
        // the provider's gate.
        Charged::Busy(answer) => error(
            StatusCode::SERVICE_UNAVAILABLE,
            &format!(
                "the provider is still making this charge: {}",
                answer["detail"]
            ),
        ),
        Charged::Refused(status, answer) => error(
            StatusCode::BAD_GATEWAY,
            &format!("the provider refused the charge with {status}: {answer}"),
        ),
        // Whether it charged is unknown; a 5xx is recorded retryable and the
        // policy re-executes a retry, which is safe: the provider
        // deduplicates by the key.
        Charged::Unreachable(why) => error(StatusCode::BAD_GATEWAY, &why),
    }
}

fn error(status: StatusCode, detail: &str) -> Response {
    (status, Json(json!({ "error": detail }))).into_response()
}
