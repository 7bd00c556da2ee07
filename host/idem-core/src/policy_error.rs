//! A policy's typed refusal to derive a key.

use serde::Serialize;
use thiserror::Error;

// Exhaustive on purpose (not `#[non_exhaustive]`): it mirrors the policy contract's
// (wit/policy.wit), which is versioned: a new variant is a new contract, and the host maps each
// variant to and from it, so a match must name them all.
/// What kind of refusal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ErrorCode {
    /// A field the policy needs is absent.
    MissingField,
    /// A field is present but its value is unacceptable.
    InvalidValue,
    /// The policy does not handle this kind of operation.
    UnsupportedKind,
}

impl ErrorCode {
    /// The contract's spelling (`missing-field`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::MissingField => "missing-field",
            ErrorCode::InvalidValue => "invalid-value",
            ErrorCode::UnsupportedKind => "unsupported-kind",
        }
    }

    /// The HTTP-style class a caller should answer with: every policy
    /// refusal is the client's fault, so 400.
    pub fn status(self) -> i32 {
        400
    }
}

impl std::str::FromStr for ErrorCode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "missing-field" => Ok(ErrorCode::MissingField),
            "invalid-value" => Ok(ErrorCode::InvalidValue),
            "unsupported-kind" => Ok(ErrorCode::UnsupportedKind),
            other => Err(format!(
                "unknown error code `{other}`: expected missing-field, invalid-value or unsupported-kind"
            )),
        }
    }
}

/// A policy's refusal to derive a key for an operation.
#[derive(Debug, Clone, PartialEq, Eq, Error, Serialize)]
#[error("{} ({}){}: {message}", code.as_str(), code.status(), field.as_ref().map(|f| format!(" in field `{f}`")).unwrap_or_default())]
pub struct PolicyError {
    /// What kind of refusal.
    pub code: ErrorCode,
    /// The field at fault, when there is one.
    pub field: Option<String>,
    /// The policy's explanation, for the caller.
    pub message: String,
}
