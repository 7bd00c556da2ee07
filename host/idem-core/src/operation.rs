//! Operations: the JSON every CLI command and the library read, and the
//! canonical form the host hands a policy.
//!
//! ```json
//! {"kind":"charge","tenant":"acme",
//!  "fields":{"customer":"c1","billing_period":"2026-11","invoice_id":"i1","amount":"100","currency":"EUR"},
//!  "run":{"run_id":"nightly-2026-11-30","trigger":"scheduled","attempt":1}}
//! ```
//!
//! Canonicalisation, so that one logical operation is always one value:
//! - every string (kind, tenant, field names, text values, run id) is
//!   normalised to Unicode NFC;
//! - fields are sorted by name (bytewise, after NFC); two names equal after
//!   NFC are an error, as is a name repeated in the JSON;
//! - numbers are spelt canonically (see [`crate::number`]);
//! - an unknown member anywhere is an error, never ignored.
//!
//! [`Operation::builder`] builds the same operation from typed values, through
//! the same canonicalisation.

use std::collections::BTreeMap;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, MapAccess, Visitor};
use thiserror::Error;
use unicode_normalization::UnicodeNormalization;

use crate::json::JsonValue;
use crate::number::{NumberError, canonical_number};

mod builder;
pub use builder::OperationBuilder;

/// Size limits applied while reading an operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OperationLimits {
    /// Largest accepted JSON document, in bytes.
    pub max_bytes: usize,
    /// Most fields in one operation.
    pub max_fields: usize,
    /// Longest kind, tenant, field name or run id, in bytes.
    pub max_name_bytes: usize,
}

impl Default for OperationLimits {
    fn default() -> Self {
        Self {
            max_bytes: 64 * 1024,
            max_fields: 256,
            max_name_bytes: 256,
        }
    }
}

/// Why an operation was refused.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum OpError {
    /// The document is larger than [`OperationLimits::max_bytes`].
    #[error("operation is {size} bytes; the limit is {limit} bytes")]
    TooLarge {
        /// The document's size, in bytes.
        size: usize,
        /// The limit it exceeds, in bytes.
        limit: usize,
    },
    /// Not JSON, or not the operation's shape (the message gives line and column).
    #[error("operation is not valid: {0}")]
    Json(#[from] serde_json::Error),
    /// Valid JSON of the right shape, but a value is unacceptable.
    #[error("operation {what}: {why}")]
    Invalid {
        /// The part at fault: the document, a member such as `run.attempt`,
        /// or a named field.
        what: String,
        /// What is wrong with it.
        why: String,
    },
}

impl OpError {
    fn invalid(what: impl Into<String>, why: impl Into<String>) -> Self {
        OpError::Invalid {
            what: what.into(),
            why: why.into(),
        }
    }
}

// Exhaustive on purpose (not `#[non_exhaustive]`): it mirrors the policy contract's
// (wit/policy.wit), which is versioned: a new variant is a new contract, and the host maps each
// variant to and from it, so a match must name them all.
/// Why an operation is being run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Trigger {
    /// A scheduled run, such as a nightly batch.
    Scheduled,
    /// A retry of an earlier run.
    Retry,
    /// Started by hand, by an operator.
    Manual,
    /// Sent by a client, such as an API request.
    Client,
}

impl Trigger {
    /// The JSON spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Trigger::Scheduled => "scheduled",
            Trigger::Retry => "retry",
            Trigger::Manual => "manual",
            Trigger::Client => "client",
        }
    }
}

impl std::str::FromStr for Trigger {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "scheduled" => Ok(Trigger::Scheduled),
            "retry" => Ok(Trigger::Retry),
            "manual" => Ok(Trigger::Manual),
            "client" => Ok(Trigger::Client),
            other => Err(format!(
                "unknown trigger `{other}`: expected scheduled, retry, manual or client"
            )),
        }
    }
}

/// The run that carries an operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunContext {
    /// The run's identifier, e.g. `nightly-2026-11-30` (NFC, non-empty).
    pub run_id: String,
    /// Why the run happened.
    pub trigger: Trigger,
    /// 1 for the first attempt.
    pub attempt: u32,
}

impl RunContext {
    /// `run_id` held to the rules an operation's `run.run_id` is read
    /// with (not empty, at most [`OperationLimits::max_name_bytes`], no
    /// control character: a NUL among them), normalised to NFC; the error
    /// names the run id as `what` (a flag, say). A run id given apart from
    /// an operation (`idem run --run-id`) is recorded in the same place.
    ///
    /// ```
    /// use idem_core::{OperationLimits, RunContext};
    /// let limits = OperationLimits::default();
    /// assert!(RunContext::check_run_id("--run-id", "nightly-7", &limits).is_ok());
    /// let refused = RunContext::check_run_id("--run-id", "a\u{0}b", &limits).unwrap_err();
    /// assert_eq!(refused.to_string(), "operation --run-id: must not contain control characters");
    /// assert!(RunContext::check_run_id("--run-id", &"x".repeat(257), &limits).is_err());
    /// ```
    pub fn check_run_id(
        what: &str,
        run_id: &str,
        limits: &OperationLimits,
    ) -> Result<String, OpError> {
        check_name(what, run_id, limits)
    }
}

// Exhaustive on purpose (not `#[non_exhaustive]`): the canonical form is defined over JSON's
// scalars (text, number, boolean); another kind would change every key.
/// A canonical field value: what [`Operation::fields`] holds. Not
/// `serde_json::Value`, which idem's API calls [`JsonValue`] where it takes
/// one.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Value {
    /// NFC-normalised text.
    Text(String),
    /// A number in canonical decimal spelling.
    Number(String),
    /// A JSON `true` or `false`.
    Boolean(bool),
}

impl Value {
    /// The value as key material: text as is, numbers in canonical spelling,
    /// booleans as `true` / `false`.
    pub fn as_material(&self) -> &str {
        match self {
            Value::Text(s) | Value::Number(s) => s,
            Value::Boolean(true) => "true",
            Value::Boolean(false) => "false",
        }
    }
}

/// A canonical operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Operation {
    /// What the effect is, e.g. `charge` (NFC, non-empty).
    pub kind: String,
    /// Whose effect it is (NFC, non-empty).
    pub tenant: String,
    /// Sorted by name, names unique.
    pub fields: BTreeMap<String, Value>,
    /// The run that carries the operation, when the document names one.
    pub run: Option<RunContext>,
    /// Logical time, when the document gave one; otherwise the host chooses.
    pub now_ms: Option<u64>,
}

impl Operation {
    /// Reads and canonicalises an operation from JSON text.
    pub fn from_json(text: &str, limits: &OperationLimits) -> Result<Self, OpError> {
        Self::from_slice(text.as_bytes(), limits)
    }

    /// Reads and canonicalises an operation from JSON bytes.
    pub fn from_slice(bytes: &[u8], limits: &OperationLimits) -> Result<Self, OpError> {
        if bytes.len() > limits.max_bytes {
            return Err(OpError::TooLarge {
                size: bytes.len(),
                limit: limits.max_bytes,
            });
        }
        // serde would also read a struct from a JSON array; an operation is an
        // object, always.
        if bytes.trim_ascii_start().first() != Some(&b'{') {
            return Err(OpError::invalid("document", "must be a JSON object"));
        }
        let raw: RawOperation = serde_json::from_slice(bytes)?;
        raw.canonicalise(limits)
    }

    /// Reads an operation from an already parsed JSON document (a
    /// `serde_json::Value`). A number in it is only as exact as the value
    /// kept it: without serde_json's `arbitrary_precision` feature, `12.50`
    /// and a 30-digit integer went through an f64. Prefer
    /// [`Operation::from_json`] on the text.
    pub fn from_value(value: JsonValue, limits: &OperationLimits) -> Result<Self, OpError> {
        let text = serde_json::to_string(&value)?;
        Self::from_json(&text, limits)
    }

    /// The canonical JSON spelling: fixed member order, sorted fields,
    /// canonical numbers, NFC strings, no white space. Equal operations have
    /// equal bytes.
    pub fn canonical_json(&self) -> String {
        let s = |v: &str| serde_json::to_string(v).expect("strings always serialise");
        let mut out = String::new();
        self.write_business_json(&mut out);
        if let Some(run) = &self.run {
            out.push_str(&format!(
                ",\"run\":{{\"run_id\":{},\"trigger\":\"{}\",\"attempt\":{}}}",
                s(&run.run_id),
                run.trigger.as_str(),
                run.attempt
            ));
        }
        if let Some(now) = self.now_ms {
            out.push_str(&format!(",\"now_ms\":{now}"));
        }
        out.push('}');
        out
    }

    /// The canonical JSON of what a record keeps to derive its key again
    /// offline: kind, tenant, fields and the logical time when the document
    /// gave one — not the run, which differs between runs of one operation.
    /// [`Operation::from_json`] reads it back as this operation without its
    /// run.
    pub fn kept_json(&self) -> String {
        let mut out = String::new();
        self.write_business_json(&mut out);
        if let Some(now) = self.now_ms {
            out.push_str(&format!(",\"now_ms\":{now}"));
        }
        out.push('}');
        out
    }

    /// The canonical JSON of kind, tenant and fields, without the closing
    /// brace of the document.
    fn write_business_json(&self, out: &mut String) {
        let s = |v: &str| serde_json::to_string(v).expect("strings always serialise");
        out.push_str(&format!(
            "{{\"kind\":{},\"tenant\":{},\"fields\":{{",
            s(&self.kind),
            s(&self.tenant)
        ));
        for (i, (name, value)) in self.fields.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(&s(name));
            out.push(':');
            match value {
                Value::Text(t) => out.push_str(&s(t)),
                Value::Number(n) => out.push_str(n),
                Value::Boolean(b) => out.push_str(if *b { "true" } else { "false" }),
            }
        }
        out.push('}');
    }

    /// The host's digest of the business operation: SHA-256 of
    /// `idem-operation-v1\n` and the canonical JSON of kind, tenant and
    /// fields (not the run, not the logical time). Independent of any
    /// policy, so the same operation is recognised under two policy
    /// versions that derive different keys for it (key drift), and the
    /// same for every run that carries it.
    pub fn business_digest(&self) -> crate::Digest {
        let mut text = String::from("idem-operation-v1\n");
        self.write_business_json(&mut text);
        text.push('}');
        crate::Digest::of_bytes(text.as_bytes())
    }

    /// An upper bound on the bytes of material in the operation (all
    /// strings plus a little per field), cheaper than spelling it out.
    pub fn material_bytes(&self) -> usize {
        let run = self.run.as_ref().map_or(0, |r| r.run_id.len() + 16);
        self.kind.len()
            + self.tenant.len()
            + run
            + self
                .fields
                .iter()
                .map(|(n, v)| n.len() + v.as_material().len() + 8)
                .sum::<usize>()
    }

    /// The field's value, if present.
    pub fn field(&self, name: &str) -> Option<&Value> {
        self.fields.get(name)
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOperation {
    kind: String,
    tenant: String,
    #[serde(default)]
    fields: RawFields,
    #[serde(default)]
    run: Option<RawRun>,
    #[serde(default)]
    now_ms: Option<u64>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRun {
    run_id: String,
    trigger: Trigger,
    #[serde(default = "first_attempt")]
    attempt: u32,
}

fn first_attempt() -> u32 {
    1
}

/// Fields as written, in document order, refusing a repeated name (serde_json
/// would silently keep the last one).
#[derive(Debug, Clone, Default)]
struct RawFields(Vec<(String, WrittenValue)>);

#[derive(Debug, Clone)]
enum WrittenValue {
    Text(String),
    Number(String),
    Boolean(bool),
}

impl<'de> Deserialize<'de> for RawFields {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct FieldsVisitor;
        impl<'de> Visitor<'de> for FieldsVisitor {
            type Value = RawFields;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object of fields whose values are strings, numbers or booleans")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawFields, A::Error> {
                let mut out: Vec<(String, WrittenValue)> = Vec::new();
                while let Some(name) = map.next_key::<String>()? {
                    if out.iter().any(|(n, _)| *n == name) {
                        return Err(de::Error::custom(format!("field `{name}` appears twice")));
                    }
                    // The value's own text: a number keeps the digits it was
                    // written with (no f64 in between, whatever serde_json's
                    // features), and is canonicalised from that text.
                    let raw: Box<serde_json::value::RawValue> = map.next_value()?;
                    let text = raw.get().trim_ascii_start();
                    let value = match text.as_bytes().first() {
                        Some(b'"') => WrittenValue::Text(
                            serde_json::from_str(text).map_err(de::Error::custom)?,
                        ),
                        Some(b't') => WrittenValue::Boolean(true),
                        Some(b'f') => WrittenValue::Boolean(false),
                        Some(b'n' | b'[' | b'{') => {
                            let what = match text.as_bytes()[0] {
                                b'n' => "null",
                                b'[' => "an array",
                                _ => "an object",
                            };
                            return Err(de::Error::custom(format!(
                                "field `{name}` is {what}; field values must be strings, numbers or booleans"
                            )));
                        }
                        _ => WrittenValue::Number(text.to_string()),
                    };
                    out.push((name, value));
                }
                Ok(RawFields(out))
            }
        }
        d.deserialize_map(FieldsVisitor)
    }
}

fn nfc(s: &str) -> String {
    s.nfc().collect()
}

fn check_name(what: &str, value: &str, limits: &OperationLimits) -> Result<String, OpError> {
    let value = nfc(value);
    if value.is_empty() {
        return Err(OpError::invalid(what, "must not be empty"));
    }
    if value.len() > limits.max_name_bytes {
        return Err(OpError::invalid(
            what,
            format!(
                "is {} bytes; the limit is {}",
                value.len(),
                limits.max_name_bytes
            ),
        ));
    }
    if value.chars().any(char::is_control) {
        return Err(OpError::invalid(
            what,
            "must not contain control characters",
        ));
    }
    Ok(value)
}

impl RawOperation {
    fn canonicalise(self, limits: &OperationLimits) -> Result<Operation, OpError> {
        let kind = check_name("`kind`", &self.kind, limits)?;
        let tenant = check_name("`tenant`", &self.tenant, limits)?;
        if self.fields.0.len() > limits.max_fields {
            return Err(OpError::invalid(
                "`fields`",
                format!(
                    "has {} fields; the limit is {}",
                    self.fields.0.len(),
                    limits.max_fields
                ),
            ));
        }
        let mut fields = BTreeMap::new();
        for (raw_name, raw_value) in self.fields.0 {
            let name = check_name(
                &format!("field name `{}`", crate::text::escaped(&raw_name)),
                &raw_name,
                limits,
            )?;
            let value = match raw_value {
                WrittenValue::Text(t) => {
                    if let Some(why) = crate::text::unstorable(&t) {
                        return Err(OpError::invalid(format!("field `{name}`"), why));
                    }
                    Value::Text(nfc(&t))
                }
                WrittenValue::Boolean(b) => Value::Boolean(b),
                WrittenValue::Number(n) => Value::Number(canonical_number(&n).map_err(|e| {
                    let why = match e {
                        NumberError::Syntax(_) | NumberError::OutOfRange(_) => e.to_string(),
                    };
                    OpError::invalid(format!("field `{name}`"), why)
                })?),
            };
            if fields.insert(name.clone(), value).is_some() {
                return Err(OpError::invalid(
                    format!("field `{name}`"),
                    "appears twice once names are normalised to Unicode NFC",
                ));
            }
        }
        let run = match self.run {
            None => None,
            Some(run) => {
                if run.attempt == 0 {
                    return Err(OpError::invalid("`run.attempt`", "starts at 1"));
                }
                Some(RunContext {
                    run_id: check_name("`run.run_id`", &run.run_id, limits)?,
                    trigger: run.trigger,
                    attempt: run.attempt,
                })
            }
        };
        Ok(Operation {
            kind,
            tenant,
            fields,
            run,
            now_ms: self.now_ms,
        })
    }
}

#[cfg(test)]
mod tests;
