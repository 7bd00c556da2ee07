//! A policy's typed refusal to derive a key.

use serde::Serialize;
use thiserror::Error;

/// What kind of refusal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ErrorCode {
    MissingField,
    InvalidValue,
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
    pub fn status(self) -> u16 {
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
    pub code: ErrorCode,
    pub field: Option<String>,
    pub message: String,
}
