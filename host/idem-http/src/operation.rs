//! A request as the operation the policy sees.

use http::request::Parts;
use http::{HeaderName, StatusCode};
use idem::core::{Operation, OperationLimits};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use crate::config::{Config, Tenant};
use crate::problem::Problem;

/// The operation kind of a request (`http-request`).
pub const KIND: &str = "http-request";

/// The operation for a request with head `parts` and body `body`:
/// `idempotency_key` (when the request has the header), `method`, `path`
/// (with its query: another query is another request) and `body_sha256`
/// (when there is a body). Bad header values are a 400 naming the header.
pub(crate) fn operation(config: &Config, parts: &Parts, body: &[u8]) -> Result<Operation, Problem> {
    let tenant = match &config.tenant {
        Tenant::Fixed(t) => t.clone(),
        Tenant::Header(name) => header_text(parts, name)?.ok_or_else(|| {
            bad_header(
                name,
                format!("the request has no `{name}` header, which names its tenant"),
            )
        })?,
    };
    let mut fields = Map::new();
    if let Some(key) = header_text(parts, &config.key_header)? {
        fields.insert("idempotency_key".into(), Value::String(unquote(&key)));
    }
    fields.insert("method".into(), parts.method.as_str().into());
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    fields.insert("path".into(), path.into());
    if !body.is_empty() {
        fields.insert(
            "body_sha256".into(),
            hex::encode(Sha256::digest(body)).into(),
        );
    }
    let value = json!({"kind": config.kind, "tenant": tenant, "fields": fields});
    Operation::from_value(value, &OperationLimits::default()).map_err(|e| {
        Problem::new(
            StatusCode::BAD_REQUEST,
            "invalid-request",
            "The request cannot be deduplicated",
            format!("the request does not make a valid operation: {e}"),
        )
    })
}

/// A header's one value as text; `None` when absent. Two values, or bytes
/// that are not visible ASCII, are a 400 naming the header.
fn header_text(parts: &Parts, name: &HeaderName) -> Result<Option<String>, Problem> {
    let mut values = parts.headers.get_all(name).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(bad_header(
            name,
            format!("the request has more than one `{name}` header"),
        ));
    }
    let text = value
        .to_str()
        .map_err(|_| bad_header(name, format!("the `{name}` header must be visible ASCII")))?;
    Ok(Some(text.to_string()))
}

/// The draft sends the key as a structured-field string (`"abc"`); Stripe
/// and most clients send it bare. Both are the same key.
fn unquote(value: &str) -> String {
    let trimmed = value.trim();
    match trimmed.strip_prefix('"').and_then(|v| v.strip_suffix('"')) {
        Some(inner) if trimmed.len() >= 2 => inner.replace("\\\"", "\"").replace("\\\\", "\\"),
        _ => trimmed.to_string(),
    }
}

fn bad_header(name: &HeaderName, detail: String) -> Problem {
    Problem::new(
        StatusCode::BAD_REQUEST,
        "invalid-header",
        "A request header is not acceptable",
        detail,
    )
    .with("header", name.as_str())
}

#[cfg(test)]
mod tests {
    use super::unquote;

    #[test]
    fn a_quoted_key_is_the_bare_key() {
        assert_eq!(unquote("\"8e03978e\""), "8e03978e");
        assert_eq!(unquote(" 8e03978e "), "8e03978e");
        assert_eq!(unquote("\"a\\\"b\""), "a\"b");
        assert_eq!(unquote("\""), "\"");
    }
}
