//! The business operation behind a key, as a person deciding about it
//! reads it: its kind, tenant and fields (the invoice, the customer, the
//! amount), from what the record kept. A key alone is a digest; a person
//! settling a charge needs to know which charge it was.

use std::collections::{BTreeMap, HashMap};

use idem_core::{Operation, OperationLimits};
use idem_store::{KeptOperation, Record, RecordKey, Store, StoreError};
use serde::Serialize;

/// At most this many fields are shown; the rest are counted.
pub const SHOWN_FIELDS: usize = 16;
/// A field's value is cut to this many characters when shown.
pub const SHOWN_VALUE_CHARS: usize = 80;

// Exhaustive on purpose (not `#[non_exhaustive]`): as [`idem_store::KeptOperation`]: kept or
// not.
/// What a person sees of a record's operation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum ShownOperation {
    /// The record kept its operation.
    Kept {
        /// What the effect is (`charge`).
        kind: String,
        /// Whose effect it is.
        tenant: String,
        /// Its fields by name, at most [`SHOWN_FIELDS`], each value at most
        /// [`SHOWN_VALUE_CHARS`] characters.
        fields: BTreeMap<String, String>,
        /// How many fields were left out, or cut, to keep it short (0 when
        /// all of it is shown).
        #[serde(skip_serializing_if = "is_zero")]
        cut: usize,
    },
    /// The record keeps no operation, and why.
    NotKept {
        /// Why, in a sentence.
        not_kept: String,
    },
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl ShownOperation {
    /// What a record's kept operation shows (see [`Record::operation`]).
    pub fn of(kept: Option<&KeptOperation>) -> Self {
        let not_kept = |why: String| ShownOperation::NotKept { not_kept: why };
        let text = match kept {
            None => {
                return not_kept(
                    "no operation kept: the record was written before stores kept operations, or by a caller that gave none".into(),
                );
            }
            Some(KeptOperation::NotKept(why)) => {
                return not_kept(format!("no operation kept: {why}"));
            }
            Some(KeptOperation::Kept(text)) => text,
        };
        let op = match Operation::from_json(text, &OperationLimits::default()) {
            Ok(op) => op,
            Err(e) => return not_kept(format!("its kept operation does not read: {e}")),
        };
        let mut cut = op.fields.len().saturating_sub(SHOWN_FIELDS);
        let fields = op
            .fields
            .iter()
            .take(SHOWN_FIELDS)
            .map(|(name, value)| {
                let value = value.as_material();
                if value.chars().count() > SHOWN_VALUE_CHARS {
                    cut += 1;
                    let short: String = value.chars().take(SHOWN_VALUE_CHARS).collect();
                    (name.clone(), format!("{short}…"))
                } else {
                    (name.clone(), value.to_string())
                }
            })
            .collect();
        ShownOperation::Kept {
            kind: op.kind,
            tenant: op.tenant,
            fields,
            cut,
        }
    }

    /// What `record` shows.
    pub fn of_record(record: &Record) -> Self {
        Self::of(record.operation.as_ref())
    }

    /// One line: `charge for acme: amount=4200 customer=c09 invoice_id=INV-7`,
    /// at most `max_chars` characters (cut with `…`).
    pub fn line(&self, max_chars: usize) -> String {
        let full = match self {
            ShownOperation::Kept {
                kind,
                tenant,
                fields,
                cut,
            } => {
                let mut line = format!("{kind} for {tenant}");
                for (i, (name, value)) in fields.iter().enumerate() {
                    line.push_str(if i == 0 { ": " } else { " " });
                    line.push_str(name);
                    line.push('=');
                    line.push_str(value);
                }
                if *cut > 0 {
                    line.push_str(" …");
                }
                line
            }
            ShownOperation::NotKept { not_kept } => format!("({not_kept})"),
        };
        if full.chars().count() <= max_chars {
            return full;
        }
        let mut short: String = full.chars().take(max_chars.saturating_sub(1)).collect();
        short.push('…');
        short
    }
}

/// The operations behind `keys`, read from their records (one read each);
/// a key whose record is gone (collected) is left out.
pub async fn operations_of<'a>(
    store: &Store,
    keys: impl IntoIterator<Item = &'a RecordKey>,
) -> Result<HashMap<RecordKey, ShownOperation>, StoreError> {
    let mut out = HashMap::new();
    for key in keys {
        if out.contains_key(key) {
            continue;
        }
        if let Some(view) = store.records().get(key).await? {
            out.insert(key.clone(), ShownOperation::of_record(&view.record));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use idem_store::NotKept;

    #[test]
    fn a_kept_operation_reads_as_kind_tenant_and_fields() {
        let kept = KeptOperation::Kept(
            r#"{"kind":"charge","tenant":"acme","fields":{"amount":4200,"invoice_id":"INV-7"}}"#
                .into(),
        );
        let shown = ShownOperation::of(Some(&kept));
        assert_eq!(
            shown.line(200),
            "charge for acme: amount=4200 invoice_id=INV-7"
        );
        assert_eq!(shown.line(20), "charge for acme: am…");
        let ShownOperation::Kept { fields, cut, .. } = &shown else {
            panic!("kept: {shown:?}");
        };
        assert_eq!(fields["invoice_id"], "INV-7");
        assert_eq!(*cut, 0);
    }

    #[test]
    fn long_values_and_many_fields_are_cut_and_counted() {
        let fields: Vec<String> = (0..20)
            .map(|i| {
                format!(
                    "\"f{i:02}\":\"{}\"",
                    "x".repeat(if i == 0 { 100 } else { 1 })
                )
            })
            .collect();
        let text = format!(
            r#"{{"kind":"k","tenant":"t","fields":{{{}}}}}"#,
            fields.join(",")
        );
        let shown = ShownOperation::of(Some(&KeptOperation::Kept(text)));
        let ShownOperation::Kept { fields, cut, .. } = &shown else {
            panic!("kept: {shown:?}");
        };
        assert_eq!(fields.len(), SHOWN_FIELDS);
        assert_eq!(*cut, 4 + 1, "four fields left out, one value cut");
        assert!(fields["f00"].ends_with('…'));
        assert_eq!(fields["f00"].chars().count(), SHOWN_VALUE_CHARS + 1);
    }

    #[test]
    fn a_record_without_its_operation_says_why() {
        let off = KeptOperation::NotKept(NotKept::OffByHost);
        assert_eq!(
            ShownOperation::of(Some(&off)).line(200),
            "(no operation kept: the host was configured not to keep operations)"
        );
        assert!(
            ShownOperation::of(None)
                .line(200)
                .contains("before stores kept")
        );
    }
}
