//! Helpers that keep a policy short: reading fields, building derivations,
//! making decisions.

use crate::{
    Decision, Derivation, DuplicateContext, ErrorCode, Operation, Part, PolicyError, PolicyInfo,
    RecordState, Rejection, Value,
};

/// Seconds in a minute.
pub const MINUTE: u64 = 60;
/// Seconds in an hour.
pub const HOUR: u64 = 3600;
/// Seconds in a day.
pub const DAY: u64 = 24 * HOUR;

impl PolicyInfo {
    /// A description of the policy.
    pub fn new(name: &str, version: &str, namespace: &str, description: &str) -> Self {
        PolicyInfo {
            name: name.into(),
            version: version.into(),
            namespace: namespace.into(),
            description: description.into(),
        }
    }
}

impl Value {
    /// The value as key material: text as is, numbers in their canonical
    /// spelling, booleans as `true` / `false`.
    pub fn material(&self) -> &str {
        match self {
            Value::Text(s) | Value::Number(s) => s,
            Value::Boolean(true) => "true",
            Value::Boolean(false) => "false",
        }
    }
}

impl Operation {
    /// The field's value, if present (fields are sorted by name).
    pub fn field(&self, name: &str) -> Option<&Value> {
        self.fields
            .binary_search_by(|f| f.name.as_str().cmp(name))
            .ok()
            .map(|i| &self.fields[i].value)
    }

    /// A text field; `missing-field` when absent, `invalid-value` when it is
    /// not text or is empty.
    pub fn text(&self, name: &str) -> Result<&str, PolicyError> {
        match self.field(name) {
            None => Err(PolicyError::missing(name)),
            Some(Value::Text(s)) if s.is_empty() => {
                Err(PolicyError::invalid(name, "must not be empty"))
            }
            Some(Value::Text(s)) => Ok(s),
            Some(_) => Err(PolicyError::invalid(name, "must be a string")),
        }
    }

    /// Any field as key material (see [`Value::material`]); `missing-field`
    /// when absent.
    pub fn material(&self, name: &str) -> Result<&str, PolicyError> {
        self.field(name)
            .map(Value::material)
            .ok_or_else(|| PolicyError::missing(name))
    }

    /// A decimal amount, given as a JSON number (`10.5`) or as a string
    /// (`"10.50"`), in its canonical spelling (see
    /// [`canonical_decimal`](crate::canonical_decimal)): both spellings give
    /// `"10.5"`, so they make one fingerprint. `missing-field` when absent;
    /// `invalid-value` for a boolean or a string that is not a decimal
    /// (`"ten"`, `"1,000"`, `"1e3"`).
    ///
    /// ```
    /// # use idem_policy::*;
    /// let op = Operation {
    ///     kind: "charge".into(),
    ///     tenant: "acme".into(),
    ///     fields: vec![
    ///         Field { name: "amount".into(), value: Value::Text("10.50".into()) },
    ///         Field { name: "fee".into(), value: Value::Number("0.3".into()) },
    ///         Field { name: "note".into(), value: Value::Text("ten".into()) },
    ///     ],
    ///     run: None,
    ///     now_ms: 0,
    /// };
    /// assert_eq!(op.decimal("amount").unwrap(), "10.5");
    /// assert_eq!(op.decimal("fee").unwrap(), "0.3");
    /// let err = op.decimal("note").unwrap_err();
    /// assert_eq!(err.code, ErrorCode::InvalidValue);
    /// assert_eq!(err.field.as_deref(), Some("note"));
    /// assert_eq!(err.message, "`note` must be a decimal like 10.50: `ten` is not a decimal: only digits, one `.` and a leading `-` are allowed");
    /// assert_eq!(op.decimal("tax").unwrap_err().code, ErrorCode::MissingField);
    /// ```
    pub fn decimal(&self, name: &str) -> Result<String, PolicyError> {
        let text = match self.field(name) {
            None => return Err(PolicyError::missing(name)),
            Some(Value::Text(s) | Value::Number(s)) => s,
            Some(Value::Boolean(_)) => {
                return Err(PolicyError::invalid(
                    name,
                    "must be a decimal like 10.50, not a boolean",
                ));
            }
        };
        crate::canonical_decimal(text)
            .map_err(|e| PolicyError::invalid(name, &format!("must be a decimal like 10.50: {e}")))
    }

    /// A text field, or `None` when absent; `invalid-value` when present but
    /// not text.
    pub fn optional_text(&self, name: &str) -> Result<Option<&str>, PolicyError> {
        match self.field(name) {
            None => Ok(None),
            Some(Value::Text(s)) => Ok(Some(s)),
            Some(_) => Err(PolicyError::invalid(name, "must be a string")),
        }
    }
}

impl PolicyError {
    /// A required field is absent.
    pub fn missing(field: &str) -> Self {
        PolicyError {
            code: ErrorCode::MissingField,
            field: Some(field.into()),
            message: format!("the operation has no `{field}`"),
        }
    }

    /// A field's value is unacceptable.
    pub fn invalid(field: &str, why: &str) -> Self {
        PolicyError {
            code: ErrorCode::InvalidValue,
            field: Some(field.into()),
            message: format!("`{field}` {why}"),
        }
    }

    /// The policy does not handle this kind of operation.
    pub fn unsupported_kind(kind: &str) -> Self {
        PolicyError {
            code: ErrorCode::UnsupportedKind,
            field: None,
            message: format!("this policy does not handle operations of kind `{kind}`"),
        }
    }
}

impl Derivation {
    /// A derivation owned by `partition`, with a one-day retention and a
    /// five-minute lease until told otherwise.
    pub fn new(partition: &str) -> Self {
        Derivation {
            key: Vec::new(),
            fingerprint: Vec::new(),
            partition: partition.into(),
            retention_s: DAY,
            lease_s: 5 * MINUTE as u32,
        }
    }

    /// Appends a named part of the key material (order matters).
    pub fn key(mut self, name: &str, value: &str) -> Self {
        self.key.push(Part {
            name: name.into(),
            value: value.into(),
        });
        self
    }

    /// Appends a named part of the fingerprint material.
    pub fn fingerprint(mut self, name: &str, value: &str) -> Self {
        self.fingerprint.push(Part {
            name: name.into(),
            value: value.into(),
        });
        self
    }

    /// How long the record is kept, in seconds.
    pub fn retention_s(mut self, seconds: u64) -> Self {
        self.retention_s = seconds;
        self
    }

    /// How long a claim holds before its lease expires, in seconds.
    pub fn lease_s(mut self, seconds: u32) -> Self {
        self.lease_s = seconds;
        self
    }
}

impl Rejection {
    /// A rejection with an HTTP-style status and a reason.
    pub fn new(status: u16, reason: &str) -> Self {
        Rejection {
            status,
            reason: reason.into(),
            retry_after_ms: None,
        }
    }

    /// Says when trying again may help.
    pub fn retry_after_ms(mut self, ms: u64) -> Self {
        self.retry_after_ms = Some(ms);
        self
    }
}

impl Decision {
    /// Reject with a status and a reason.
    pub fn reject(status: u16, reason: &str) -> Self {
        Decision::Reject(Rejection::new(status, reason))
    }

    /// The decisions most policies want:
    /// - a different fingerprint → reject 422 (the key was reused for another request);
    /// - completed or permanently failed → replay the stored outcome;
    /// - in progress with a live lease → reject 409, retry after the lease;
    /// - in progress with an expired lease → mark outcome-unknown for review
    ///   (the effect may have happened: never run it blind);
    /// - failed-retryable → re-execute;
    /// - outcome-unknown → reject 409 for review.
    pub fn standard(ctx: &DuplicateContext) -> Self {
        if !ctx.fingerprint_matches {
            return Decision::reject(
                422,
                "the idempotency key was reused for a different request",
            );
        }
        match ctx.state {
            RecordState::Completed | RecordState::FailedPermanent => Decision::Replay,
            RecordState::InProgress if ctx.lease_remaining_ms > 0 => Decision::Reject(
                Rejection::new(409, "the operation is in progress")
                    .retry_after_ms(ctx.lease_remaining_ms),
            ),
            RecordState::InProgress => Decision::MarkUnknown(Rejection::new(
                409,
                "the previous holder's lease expired before it finished; the outcome needs review",
            )),
            RecordState::FailedRetryable => Decision::ReExecute,
            RecordState::OutcomeUnknown => Decision::reject(
                409,
                "the outcome of an earlier attempt is unknown and needs review",
            ),
        }
    }
}
