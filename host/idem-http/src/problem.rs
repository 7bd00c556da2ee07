//! RFC 9457 problem details: every error the layer answers with is an
//! `application/problem+json` body naming what was wrong.
//!
//! `type` is a `tag:` URI ([`TYPE_PREFIX`] and a slug, e.g.
//! `tag:idem.invalid,2026:problem/missing-idempotency-key`), so clients can
//! tell the cases apart without parsing `detail`.

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use serde_json::{Map, Value, json};

use crate::response_body::{ResponseBody, full};

/// The start of every problem `type` the layer sends.
pub const TYPE_PREFIX: &str = "tag:idem.invalid,2026:problem/";

/// The media type of a problem body.
pub const CONTENT_TYPE: &str = "application/problem+json";

/// One problem: a status, a slug naming the case, a human title and detail,
/// and extension members.
#[derive(Debug, Clone)]
pub struct Problem {
    /// The HTTP status.
    pub status: StatusCode,
    /// What kind of problem (the end of its `type` URI).
    pub slug: &'static str,
    /// A short, fixed summary of the kind.
    pub title: &'static str,
    /// This occurrence, for a human.
    pub detail: String,
    /// Seconds to wait before retrying, sent as `Retry-After` too.
    pub retry_after_s: Option<u64>,
    /// Extension members (e.g. the field a policy named).
    pub extensions: Map<String, Value>,
}

impl Problem {
    /// A problem without extensions.
    pub fn new(
        status: StatusCode,
        slug: &'static str,
        title: &'static str,
        detail: impl Into<String>,
    ) -> Self {
        Problem {
            status,
            slug,
            title,
            detail: detail.into(),
            retry_after_s: None,
            extensions: Map::new(),
        }
    }

    /// Asks the client to come back after `ms` milliseconds (rounded up to
    /// whole seconds, at least one: `Retry-After` counts seconds).
    pub fn retry_after_ms(mut self, ms: u64) -> Self {
        self.retry_after_s = Some(ms.div_ceil(1000).max(1));
        self
    }

    /// Adds an extension member.
    pub fn with(mut self, name: &str, value: impl Into<Value>) -> Self {
        self.extensions.insert(name.into(), value.into());
        self
    }

    /// The problem as JSON.
    pub fn to_json(&self) -> Value {
        let mut body = json!({
            "type": format!("{TYPE_PREFIX}{}", self.slug),
            "title": self.title,
            "status": self.status.as_u16(),
            "detail": self.detail,
        });
        let object = body.as_object_mut().expect("a JSON object");
        if let Some(s) = self.retry_after_s {
            object.insert("retry_after_s".into(), s.into());
        }
        for (name, value) in &self.extensions {
            object.insert(name.clone(), value.clone());
        }
        body
    }

    /// The problem's bytes.
    pub fn to_bytes(&self) -> Bytes {
        Bytes::from(self.to_json().to_string())
    }

    /// The response carrying it.
    pub fn into_response(self) -> Response<ResponseBody> {
        let mut response = Response::new(full(self.to_bytes()));
        *response.status_mut() = self.status;
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(CONTENT_TYPE));
        if let Some(s) = self.retry_after_s {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        response
    }
}
