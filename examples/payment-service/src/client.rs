//! Calls to the payment provider, shared by the service and the job.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

/// How a charge at the provider ended.
#[derive(Debug)]
pub enum Charged {
    /// Charged now, or earlier under the same key: the receipt.
    Receipt(Value),
    /// The provider's gate refused a fence lower than one it saw for the
    /// key: this holder was deposed, and nothing was charged. Its answer.
    Stale(Value),
    /// The provider's gate is still making a charge under the key (another
    /// holder's): nothing was charged by this call; come back. Its answer.
    Busy(Value),
    /// The provider refused the call otherwise: its status and answer.
    /// Nothing was charged.
    Refused(u16, Value),
    /// The provider could not be reached, or its answer was lost: whether
    /// it charged is unknown (its key makes a retry safe).
    Unreachable(String),
}

/// A provider at a base URL.
#[derive(Clone)]
pub struct ProviderClient {
    base: String,
    http: Client<HttpConnector, Full<Bytes>>,
}

impl ProviderClient {
    /// A client for the provider at `base` (`http://HOST:PORT`).
    pub fn new(base: &str) -> Self {
        ProviderClient {
            base: base.trim_end_matches('/').to_string(),
            http: Client::builder(TokioExecutor::new()).build_http(),
        }
    }

    /// Charges `request` under `key` at `fence`.
    pub async fn charge(&self, key: &str, fence: u64, request: &Value) -> Charged {
        let call = http::Request::post(format!("{}/v1/charges", self.base))
            .header("content-type", "application/json")
            .header("idempotency-key", key)
            .header(crate::provider::FENCE_HEADER, fence.to_string())
            .body(Full::new(Bytes::from(request.to_string())));
        let call = match call {
            Ok(call) => call,
            Err(e) => return Charged::Unreachable(format!("bad provider URL {}: {e}", self.base)),
        };
        let response = match self.http.request(call).await {
            Ok(response) => response,
            Err(e) => return Charged::Unreachable(format!("calling the provider failed: {e}")),
        };
        let status = response.status().as_u16();
        let body = match response.into_body().collect().await {
            Ok(body) => body.to_bytes(),
            Err(e) => return Charged::Unreachable(format!("the provider's answer broke off: {e}")),
        };
        let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let problem = body["type"]
            .as_str()
            .and_then(|t| t.strip_prefix(idem_http::problem::TYPE_PREFIX));
        match (status, problem) {
            (200, _) => Charged::Receipt(body["charge"].clone()),
            (409, Some("stale-fence")) => Charged::Stale(body),
            (409, Some("request-in-flight")) => Charged::Busy(body),
            _ => Charged::Refused(status, body),
        }
    }
}
