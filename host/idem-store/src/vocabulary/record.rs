//! The public vocabulary of stores: keys, records, outcomes, claims and
//! what a call returns. Plain data; no I/O.

use std::fmt;

use idem_core::OutcomeSummary;
pub use idem_core::{Digest, RecordState};

use super::Holder;
use super::StoreOptions;

/// Longest stored error text; longer text is cut (on a character boundary)
/// and marked with [`TRUNCATION_MARK`]. Error text is diagnostic, so cutting
/// it is safer than refusing the write that reports a failure.
pub const MAX_ERROR_BYTES: usize = 4096;

/// Appended to error text that was cut to [`MAX_ERROR_BYTES`].
pub const TRUNCATION_MARK: &str = " …[truncated]";

/// Longest canonical operation a record keeps, in bytes (16 KiB); a longer
/// one is not kept ([`NotKept::TooLarge`]). An operation may be 64 KiB: the
/// bound keeps a store of millions of records from quadrupling in size for
/// the rare large operation, which then cannot be diffed.
pub const MAX_KEPT_OPERATION_BYTES: usize = 16 * 1024;

// Exhaustive on purpose (not `#[non_exhaustive]`): a record keeps its operation or says why not
// ([`NotKept`] grows).
/// What a record keeps of the business operation that made it, so that its
/// key can be derived again offline (`idem diff --store`) with another
/// version of the policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeptOperation {
    /// The canonical operation as JSON text (the host's canonical spelling
    /// of kind, tenant and fields; at most [`MAX_KEPT_OPERATION_BYTES`]).
    Kept(String),
    /// Not kept, and why: such a record cannot be diffed.
    NotKept(NotKept),
}

/// Why a record keeps no operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum NotKept {
    /// The canonical operation was longer than [`MAX_KEPT_OPERATION_BYTES`].
    TooLarge {
        /// Its length in bytes.
        bytes: usize,
    },
    /// The host was configured not to keep operations
    /// ([`StoreOptions::keep_operations`] or the engine's option).
    OffByHost,
    /// The policy said its operations carry sensitive fields.
    OffByPolicy,
}

impl fmt::Display for NotKept {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NotKept::TooLarge { bytes } => write!(
                f,
                "its operation ({bytes} bytes) was larger than the {MAX_KEPT_OPERATION_BYTES} kept"
            ),
            NotKept::OffByHost => f.write_str("the host was configured not to keep operations"),
            NotKept::OffByPolicy => f.write_str("its policy asked for operations not to be kept"),
        }
    }
}

impl KeptOperation {
    /// The column spelling: the JSON text itself (an object, so it starts
    /// with `{`), or `!` and the reason it was not kept (`!too-large N`,
    /// `!off-by-host`, `!off-by-policy`): one nullable text column, no
    /// ambiguity.
    pub fn to_column(&self) -> String {
        match self {
            KeptOperation::Kept(text) => text.clone(),
            KeptOperation::NotKept(NotKept::TooLarge { bytes }) => format!("!too-large {bytes}"),
            KeptOperation::NotKept(NotKept::OffByHost) => "!off-by-host".to_string(),
            KeptOperation::NotKept(NotKept::OffByPolicy) => "!off-by-policy".to_string(),
        }
    }

    /// Reads [`KeptOperation::to_column`]'s spelling back.
    pub fn from_column(text: &str) -> Result<Self, String> {
        if text.starts_with('{') {
            return Ok(KeptOperation::Kept(text.to_string()));
        }
        match text {
            "!off-by-host" => Ok(KeptOperation::NotKept(NotKept::OffByHost)),
            "!off-by-policy" => Ok(KeptOperation::NotKept(NotKept::OffByPolicy)),
            _ => text
                .strip_prefix("!too-large ")
                .and_then(|n| n.parse().ok())
                .map(|bytes| KeptOperation::NotKept(NotKept::TooLarge { bytes }))
                .ok_or_else(|| {
                    // 64 characters are at most 256 bytes: bounded.
                    let shown: String = text.chars().take(64).collect();
                    format!("`{shown}` is not a kept operation")
                }),
        }
    }

    /// The operation's JSON text, when it was kept.
    pub fn text(&self) -> Option<&str> {
        match self {
            KeptOperation::Kept(text) => Some(text),
            KeptOperation::NotKept(_) => None,
        }
    }

    /// What a store keeps of `self` under `options`: nothing beyond the
    /// bound, nothing when the host turned keeping off.
    pub(crate) fn bounded(self, options: &StoreOptions) -> Self {
        match self {
            KeptOperation::Kept(_) if !options.keep_operations => {
                KeptOperation::NotKept(NotKept::OffByHost)
            }
            KeptOperation::Kept(text) if text.len() > MAX_KEPT_OPERATION_BYTES => {
                KeptOperation::NotKept(NotKept::TooLarge { bytes: text.len() })
            }
            other => other,
        }
    }
}

/// What identifies a record: keys of different namespaces never collide.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RecordKey {
    /// The policy's namespace.
    pub namespace: String,
    /// The SHA-256 key the engine derived (the record's key within its
    /// namespace).
    pub digest: Digest,
}

impl RecordKey {
    /// A key in a namespace.
    pub fn new(namespace: impl Into<String>, digest: Digest) -> Self {
        RecordKey {
            namespace: namespace.into(),
            digest,
        }
    }
}

impl fmt::Display for RecordKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.digest)
    }
}

/// The stored result of an attempt.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Outcome {
    /// The caller's status: an HTTP status, a process's exit status, a
    /// worker's own code. An `i32`, as every status in idem's Rust API
    /// is: it holds each of those (an exit status is `i32` in
    /// `std::process::ExitStatus::code`, negative for some Windows ones),
    /// and it is what the stores keep (SQLite's and PostgreSQL's
    /// `integer`) and what a policy is shown (the contract's `s32`).
    pub status: i32,
    /// The outcome's bytes, at most the store's `max_outcome_bytes`
    /// (a larger body is refused with [`StoreError::OutcomeTooLarge`]).
    pub body: Vec<u8>,
    /// The error message of a failed attempt; cut to [`MAX_ERROR_BYTES`].
    pub error: Option<String>,
}

impl Outcome {
    /// A successful outcome.
    pub fn new(status: i32, body: impl Into<Vec<u8>>) -> Self {
        Outcome {
            status,
            body: body.into(),
            error: None,
        }
    }

    /// A failure with a message and no body.
    pub fn error(status: i32, message: impl Into<String>) -> Self {
        Outcome {
            status,
            body: Vec::new(),
            error: Some(message.into()),
        }
    }

    /// What a policy sees of the outcome (never its bytes).
    pub fn summary(&self) -> OutcomeSummary {
        OutcomeSummary {
            status: self.status,
            size: self.body.len() as u64,
            error: self.error.clone(),
        }
    }
}

/// A stored record.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Record {
    /// Namespace and key.
    pub key: RecordKey,
    /// The digest of the policy that derived the key: `sha256:<64 hex>`.
    pub policy_digest: String,
    /// What must match for a duplicate to be a true replay.
    pub fingerprint: Digest,
    /// Who owns the effect (partitioned ownership).
    pub partition: String,
    /// Where the record is in its life.
    pub state: RecordState,
    /// The current fencing token: only its holder may write.
    pub fence: u64,
    /// When the current lease ends, in ms since the epoch, by the store clock.
    pub lease_until_ms: u64,
    /// Attempts made under this key (1 after the first claim).
    pub attempts: u32,
    /// When the record was created, store clock.
    pub created_ms: u64,
    /// When the record last changed, store clock.
    pub updated_ms: u64,
    /// How long the record is kept after it was last written, in ms.
    pub retention_ms: u64,
    /// When the record may be collected, store clock.
    pub retain_until_ms: u64,
    /// The outcome of a completed or failed attempt.
    pub outcome: Option<Outcome>,
    /// Who holds (or last held) the record.
    pub holder: Holder,
    /// The business operation that made the record, as kept by its first
    /// claim (a take-over keeps it); `None` on a record written before
    /// stores kept operations, or by a caller that gave none.
    pub operation: Option<KeptOperation>,
    /// Whether the current attempt's effect commits in the same store
    /// transaction as its end ([`ClaimRequest::effect_atomic`], set by the
    /// claim or take-over that made the attempt). Such a record in progress
    /// past its lease is known not to have had its effect: a duplicate is
    /// told so ([`Existing::duplicate_context`]) and re-executes, where any
    /// other expired claim may have done its effect and goes to review.
    ///
    /// [`ClaimRequest::effect_atomic`]: crate::ClaimRequest::effect_atomic
    /// [`Existing::duplicate_context`]: crate::Existing::duplicate_context
    pub effect_atomic: bool,
}

impl Record {
    /// Lease left at `now_ms`: 0 when expired or when not in progress.
    pub fn lease_remaining_ms(&self, now_ms: u64) -> u64 {
        if self.state == RecordState::InProgress {
            self.lease_until_ms.saturating_sub(now_ms)
        } else {
            0
        }
    }

    /// Whether this record is a claim whose lease expired (store clock
    /// `now_ms`) and whose effect commits with its end: its holder did
    /// nothing that lasts, so the effect is safe to run again.
    pub fn expired_without_effect(&self, now_ms: u64) -> bool {
        self.effect_atomic && self.state == RecordState::InProgress && self.lease_until_ms <= now_ms
    }
}

/// A record as the store saw it, with store-clock times.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RecordView {
    /// The record.
    pub record: Record,
    /// The store clock when the record was read.
    pub now_ms: u64,
    /// Age of the record (since creation), store clock.
    pub age_ms: u64,
    /// Lease left on an in-progress record; 0 when expired or not in
    /// progress.
    pub lease_remaining_ms: u64,
}

impl RecordView {
    pub(crate) fn at(record: Record, now_ms: u64) -> Self {
        RecordView {
            age_ms: now_ms.saturating_sub(record.created_ms),
            lease_remaining_ms: record.lease_remaining_ms(now_ms),
            now_ms,
            record,
        }
    }
}

/// Which records [`Records::list`](crate::Records::list) returns, most recently updated first.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ListFilter {
    /// Only this namespace.
    pub namespace: Option<String>,
    /// Only this partition.
    pub partition: Option<String>,
    /// Only records in this state.
    pub state: Option<RecordState>,
    /// At most this many records (all when `None`).
    pub limit: Option<u32>,
    /// Only records whose kept operation has each of these fields with
    /// this value, as the policy reads it (`invoice_id` = `R-189`; a
    /// number in its canonical spelling, a boolean as `true` or `false`).
    /// A record that kept no operation matches none.
    pub fields: Vec<(String, String)>,
    /// Only records listed after this one: the next page of a list whose
    /// last row was `after` (keyset paging: a record added meanwhile, which
    /// lists first, moves no row of the pages that follow).
    pub after: Option<ListCursor>,
    /// Only records listed before this one: the rows above a page whose
    /// first row was `before`. Listed in the same order, so the page just
    /// above is the last rows of the answer (a `limit` keeps the first).
    pub before: Option<ListCursor>,
}

/// A record's place in the order [`Records::list`](crate::Records::list)
/// lists in: most recently updated first, then by namespace and key (their
/// bytes). A page of a list ends at one ([`ListFilter::after`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListCursor {
    /// The record's last change, store clock.
    pub updated_ms: u64,
    /// Its key.
    pub key: RecordKey,
}

impl ListCursor {
    /// The place of `record`.
    pub fn of(record: &Record) -> ListCursor {
        ListCursor {
            updated_ms: record.updated_ms,
            key: record.key.clone(),
        }
    }

    /// Whether a record at `updated_ms` under `key` lists after this place
    /// (a later row of the list).
    pub fn lists_after(&self, updated_ms: u64, key: &RecordKey) -> bool {
        updated_ms < self.updated_ms || (updated_ms == self.updated_ms && *key > self.key)
    }

    /// Whether a record at `updated_ms` under `key` lists before this
    /// place.
    pub fn lists_before(&self, updated_ms: u64, key: &RecordKey) -> bool {
        updated_ms > self.updated_ms || (updated_ms == self.updated_ms && *key < self.key)
    }
}

impl ListFilter {
    /// Text the kept operation of every record this filter keeps holds
    /// (the first field's value as its JSON spells it, less any quotes):
    /// a backend that scans (SQLite) passes over the rest without decoding
    /// them.
    #[cfg(feature = "sqlite")]
    pub(crate) fn needle(&self) -> Option<String> {
        let (_, value) = self.fields.first()?;
        let json = serde_json::to_string(value).expect("a string always serialises");
        Some(json[1..json.len() - 1].to_string())
    }

    /// The first field asked for, as a store's lookup index is asked for
    /// it (see [`FieldLookup`]); `None` when no field is.
    #[cfg(any(feature = "sqlite", feature = "postgres"))]
    pub(crate) fn lookup(&self) -> Option<FieldLookup<'_>> {
        let (name, text) = self.fields.first()?;
        // A number or a boolean is also looked for as one: the operation
        // `{"amount": 150}` has `amount` = `150` as the policy reads it.
        let json = matches!(
            serde_json::from_str::<serde_json::Value>(text),
            Ok(serde_json::Value::Number(_) | serde_json::Value::Bool(_))
        )
        .then_some(text.as_str());
        Some(FieldLookup { name, text, json })
    }

    /// How many records a backend returns: all that match the rest when
    /// fields are asked for, since only [`ListFilter::keeps`] can count
    /// those.
    pub(crate) fn backend_limit(&self) -> Option<u32> {
        if self.fields.is_empty() {
            self.limit
        } else {
            None
        }
    }

    /// Whether `record` lies between the cursors asked for, if any.
    pub(crate) fn within(&self, record: &Record) -> bool {
        self.after
            .as_ref()
            .is_none_or(|c| c.lists_after(record.updated_ms, &record.key))
            && self
                .before
                .as_ref()
                .is_none_or(|c| c.lists_before(record.updated_ms, &record.key))
    }

    /// Whether `record`'s kept operation has every field asked for.
    pub(crate) fn keeps(&self, record: &Record) -> bool {
        if self.fields.is_empty() {
            return true;
        }
        let Some(KeptOperation::Kept(text)) = &record.operation else {
            return false;
        };
        let Ok(op) = idem_core::Operation::from_json(text, &idem_core::OperationLimits::default())
        else {
            return false;
        };
        self.fields.iter().all(|(name, value)| {
            op.fields
                .get(name)
                .is_some_and(|v| v.as_material() == value.as_str())
        })
    }
}

/// One field of a [`ListFilter`] as a store's lookup index is asked for it:
/// every record whose kept operation has the field `name` spelt as the
/// JSON string `text`, or as the JSON `json` (a number or a boolean). A
/// superset of what the filter keeps (`1.50` finds `1.5` too):
/// [`ListFilter::keeps`] decides.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) struct FieldLookup<'a> {
    /// The field's name.
    pub name: &'a str,
    /// The value, looked for as a JSON string.
    pub text: &'a str,
    /// The value's own text when it is a JSON number or boolean.
    pub json: Option<&'a str>,
}

#[cfg(feature = "postgres")]
impl FieldLookup<'_> {
    /// The `jsonb` documents the operation's fields must contain one of:
    /// `{"name": "text"}`, and `{"name": json}` when the value is also JSON.
    pub(crate) fn containment(&self) -> (String, Option<String>) {
        let name = serde_json::to_string(self.name).expect("a string always serialises");
        let text = serde_json::to_string(self.text).expect("a string always serialises");
        (
            format!("{{{name}:{text}}}"),
            self.json.map(|json| format!("{{{name}:{json}}}")),
        )
    }
}
