//! The JSON the routes take, and the outcome bodies they carry. Every
//! request type denies unknown members: a misspelt member is an error
//! naming it, never silently ignored.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use idem::store::{Digest, Outcome};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::problem::{ApiError, invalid};

/// `/v1/derive`: one operation (`kind`, `tenant`,
/// `fields`, optionally `run`, as `idem key` reads it).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct OperationRequest {
    pub(crate) operation: Value,
}

/// `/v1/begin`: one operation, and whether the client's effect commits in
/// its own transaction with the completion (`atomic`, default `false`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct BeginRequest {
    pub(crate) operation: Value,
    /// The client completes inside the transaction that holds its effect's
    /// writes, on the store's PostgreSQL database (idem's completion SQL
    /// function): the record says so, and an expired claim is re-executed
    /// by a duplicate instead of waiting for review.
    #[serde(default)]
    pub(crate) atomic: bool,
    /// Who is asking, as the client names itself (`billing@web-3:4242`,
    /// the clients' default): the attempt log keeps it as the holder, in
    /// place of this sidecar's own process. Untrusted text: 1 to 128
    /// bytes, no control character (see [`idem::store::CallerName`]).
    pub(crate) caller: Option<String>,
}

/// An outcome's body from the `body` (text) and `body_base64` (bytes)
/// members, not both; empty when neither is given. (Not a flattened struct:
/// serde cannot deny unknown members through a flatten.)
pub(crate) fn body_bytes(
    body: &Option<String>,
    body_base64: &Option<String>,
) -> Result<Vec<u8>, ApiError> {
    match (body, body_base64) {
        (Some(_), Some(_)) => Err(invalid(
            Some("body_base64"),
            "give `body` (text) or `body_base64` (bytes), not both",
        )),
        (Some(text), None) => Ok(text.clone().into_bytes()),
        (None, Some(b64)) => STANDARD.decode(b64).map_err(|e| {
            invalid(
                Some("body_base64"),
                format!("`body_base64` is not base64: {e}"),
            )
        }),
        (None, None) => Ok(Vec::new()),
    }
}

/// `/v1/complete`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CompleteRequest {
    pub(crate) key: String,
    pub(crate) fence: u64,
    #[serde(default)]
    pub(crate) status: i32,
    pub(crate) body: Option<String>,
    pub(crate) body_base64: Option<String>,
}

/// `/v1/fail`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FailRequest {
    pub(crate) key: String,
    pub(crate) fence: u64,
    pub(crate) retryable: bool,
    #[serde(default = "failed_status")]
    pub(crate) status: i32,
    pub(crate) error: Option<String>,
    pub(crate) body: Option<String>,
    pub(crate) body_base64: Option<String>,
}

fn failed_status() -> i32 {
    1
}

/// `/v1/heartbeat`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct HeartbeatRequest {
    pub(crate) key: String,
    pub(crate) fence: u64,
    pub(crate) lease_ms: u64,
}

/// How `/v1/resolve` settles a record.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum ResolutionKind {
    Completed,
    Release,
    Reject,
}

/// `/v1/resolve`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ResolveRequest {
    pub(crate) key: String,
    pub(crate) fence: u64,
    pub(crate) resolution: ResolutionKind,
    pub(crate) status: Option<i32>,
    pub(crate) body: Option<String>,
    pub(crate) body_base64: Option<String>,
    pub(crate) reason: String,
    pub(crate) by: String,
    /// Amend a person's release or rejection (written at `fence`) rather
    /// than settle a record waiting for review.
    #[serde(default)]
    pub(crate) amend: bool,
}

/// `/v1/report`: which part of the attempt log (every member optional).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReportRequest {
    pub(crate) since_ms: Option<u64>,
    pub(crate) until_ms: Option<u64>,
    pub(crate) run_id: Option<String>,
    pub(crate) key: Option<String>,
}

/// A key as the client sent it back: the 64 lower-case hex characters
/// begin answered (one spelling per key, as the contract says).
pub(crate) fn parse_key(text: &str, member: &str) -> Result<Digest, ApiError> {
    let lower_hex =
        text.len() == 64 && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    match Digest::from_hex(text) {
        Some(d) if lower_hex => Ok(d),
        _ => Err(invalid(
            Some(member),
            format!(
                "`{member}` must be the 64 lower-case hex characters begin answered, not `{}`",
                text.chars().take(80).collect::<String>()
            ),
        )),
    }
}

/// The largest fence or time a request may carry: the stores keep them as
/// signed 64-bit integers.
pub(crate) const MAX_INTEGER: u64 = i64::MAX as u64;

/// Refuses a fence or a time past [`MAX_INTEGER`], naming the member.
pub(crate) fn check_integer(value: u64, member: &str) -> Result<u64, ApiError> {
    if value <= MAX_INTEGER {
        Ok(value)
    } else {
        Err(invalid(
            Some(member),
            format!("`{member}` is {value}; at most {MAX_INTEGER}"),
        ))
    }
}

/// Refuses a text no store keeps (one holding a NUL), naming the member,
/// before anything reaches the engine or the store (PostgreSQL would
/// refuse it only after the claim, as if it were an outage).
pub(crate) fn check_text(text: &str, member: &str) -> Result<(), ApiError> {
    match idem::core::text::unstorable(text) {
        None => Ok(()),
        Some(why) => Err(invalid(
            Some(member),
            format!("`{member}` {why}: nothing was done"),
        )),
    }
}

/// The statuses an outcome may carry: a process's exit status (0–255) or
/// an HTTP status (100–599), with room to spare; nothing negative.
pub(crate) const STATUS_RANGE: std::ops::RangeInclusive<i32> = 0..=999;

/// Refuses a status outside [`STATUS_RANGE`], naming the member.
pub(crate) fn check_status(status: i32, member: &str) -> Result<i32, ApiError> {
    if STATUS_RANGE.contains(&status) {
        Ok(status)
    } else {
        Err(invalid(
            Some(member),
            format!(
                "`{member}` is {status}; a status is from {} to {} (an exit status or an HTTP status)",
                STATUS_RANGE.start(),
                STATUS_RANGE.end()
            ),
        ))
    }
}

/// An outcome as JSON: its status, its body as text when it is UTF-8
/// (`body`) or else in base64 (`body_base64`), and a failure's error.
pub(crate) fn outcome_json(outcome: &Outcome) -> Value {
    let mut out = json!({ "status": outcome.status, "error": outcome.error });
    match std::str::from_utf8(&outcome.body) {
        Ok(text) => out["body"] = text.into(),
        Err(_) => out["body_base64"] = STANDARD.encode(&outcome.body).into(),
    }
    out
}
