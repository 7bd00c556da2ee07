//! An operation built from typed values instead of JSON text.
//!
//! The builder holds what the JSON reader reads (the names and values as
//! given, in order) and [`OperationBuilder::build`] canonicalises them with
//! the reader's own code: NFC, the checks of names and text, numbers
//! spelt canonically, names equal after NFC refused, the limits. So an
//! operation built here and one read from the JSON that spells the same
//! values are equal, byte for byte in their canonical JSON, and a value
//! one refuses the other refuses too.

use super::{
    OpError, Operation, OperationLimits, RawFields, RawOperation, RawRun, Trigger, WrittenValue,
};

/// Builds an [`Operation`] from typed values: the typed counterpart of
/// [`Operation::from_json`], made with [`Operation::builder`].
///
/// Values are checked when the operation is built, not when they are
/// added, so a chain of calls ends with one `?`. A field name given twice
/// is refused (as a name repeated in the JSON is), and so are two names
/// that become one once normalised to Unicode NFC.
///
/// ```
/// use idem_core::{Operation, OperationLimits, Trigger, Value};
///
/// let op = Operation::builder("charge", "tenant-a")
///     .text("invoice_id", "R-1")
///     .number("amount", "12.50")
///     .integer("items", 3)
///     .boolean("express", false)
///     .run("nightly-2026-11-30", Trigger::Scheduled, 1)
///     .build()?;
///
/// // Numbers are spelt canonically, as in an operation read from JSON.
/// assert_eq!(op.field("amount"), Some(&Value::Number("12.5".into())));
/// let json = r#"{"kind":"charge","tenant":"tenant-a",
///     "fields":{"invoice_id":"R-1","amount":12.50,"items":3,"express":false},
///     "run":{"run_id":"nightly-2026-11-30","trigger":"scheduled"}}"#;
/// assert_eq!(op, Operation::from_json(json, &OperationLimits::default())?);
///
/// // Refused as the JSON reader refuses it: `1.` is no number.
/// assert!(Operation::builder("charge", "tenant-a").number("amount", "1.").build().is_err());
/// # Ok::<(), idem_core::OpError>(())
/// ```
#[derive(Debug, Clone)]
#[must_use = "an operation builder does nothing until `build` is called"]
pub struct OperationBuilder {
    raw: RawOperation,
}

impl Operation {
    /// A builder of the operation of `kind` for `tenant`, with no field,
    /// no run and no logical time yet (see [`OperationBuilder`]).
    pub fn builder(kind: impl Into<String>, tenant: impl Into<String>) -> OperationBuilder {
        OperationBuilder {
            raw: RawOperation {
                kind: kind.into(),
                tenant: tenant.into(),
                fields: RawFields::default(),
                run: None,
                now_ms: None,
            },
        }
    }
}

impl OperationBuilder {
    /// Adds the text field `name` (a JSON string).
    pub fn text(self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.field(name.into(), WrittenValue::Text(value.into()))
    }

    /// Adds the number field `name`, spelt as JSON spells a number
    /// (`12.50`, `-3`, `1e3`): exact whatever its precision, since a
    /// number is key material as text and never passes through a float.
    /// Anything else (`1.`, `+1`, `0x10`, `NaN`) is refused when the
    /// operation is built. For a float, spell the decimal you mean.
    pub fn number(self, name: impl Into<String>, spelling: impl Into<String>) -> Self {
        self.field(name.into(), WrittenValue::Number(spelling.into()))
    }

    /// Adds the integer field `name`: any of Rust's integer types up to
    /// `i64`/`u64` (and `i128`), exactly.
    pub fn integer(self, name: impl Into<String>, value: impl Into<i128>) -> Self {
        self.field(name.into(), WrittenValue::Number(value.into().to_string()))
    }

    /// Adds the boolean field `name`.
    pub fn boolean(self, name: impl Into<String>, value: bool) -> Self {
        self.field(name.into(), WrittenValue::Boolean(value))
    }

    /// Names the run that carries the operation (the JSON's `run`):
    /// `attempt` is 1 for the first.
    pub fn run(mut self, run_id: impl Into<String>, trigger: Trigger, attempt: u32) -> Self {
        self.raw.run = Some(RawRun {
            run_id: run_id.into(),
            trigger,
            attempt,
        });
        self
    }

    /// Gives the operation's logical time (the JSON's `now_ms`);
    /// otherwise the host chooses.
    pub fn now_ms(mut self, now_ms: u64) -> Self {
        self.raw.now_ms = Some(now_ms);
        self
    }

    /// The canonical operation, within the default [`OperationLimits`].
    pub fn build(self) -> Result<Operation, OpError> {
        self.build_with(&OperationLimits::default())
    }

    /// The canonical operation, within `limits`: those of names and fields
    /// as for JSON, and [`OperationLimits::max_bytes`] on the operation's
    /// canonical JSON ([`Operation::canonical_json`]), the document it
    /// stands for.
    pub fn build_with(self, limits: &OperationLimits) -> Result<Operation, OpError> {
        let fields = &self.raw.fields.0;
        for (i, (name, _)) in fields.iter().enumerate() {
            if fields[..i].iter().any(|(earlier, _)| earlier == name) {
                return Err(OpError::invalid(
                    format!("field `{}`", crate::text::escaped(name)),
                    "appears twice",
                ));
            }
        }
        let op = self.raw.canonicalise(limits)?;
        let size = op.canonical_json().len();
        if size > limits.max_bytes {
            return Err(OpError::TooLarge {
                size,
                limit: limits.max_bytes,
            });
        }
        Ok(op)
    }

    fn field(mut self, name: String, value: WrittenValue) -> Self {
        self.raw.fields.0.push((name, value));
        self
    }
}

#[cfg(test)]
mod tests;
