//! The one row codec of the SQL stores: the `records` columns, by name, and
//! their translation to and from a [`Record`] with typed errors. Each
//! dialect only says how to read a named column of its rows
//! ([`ColumnReader`]) and hands [`RecordRow`]'s values to its client.

use std::borrow::Cow;

use crate::vocabulary::StoreError;
use crate::vocabulary::{AttemptEntry, AttemptEvent};
use crate::vocabulary::{Digest, KeptOperation, Outcome, Record, RecordKey, RecordState};
use crate::vocabulary::{Holder, HolderToken};

/// The `records` columns, in the order every statement lists them. Both
/// dialects' schemas use these names.
pub const COLUMNS: [&str; 24] = [
    "namespace",
    "key",
    "policy_digest",
    "fingerprint",
    "partition",
    "state",
    "fence",
    "lease_until",
    "attempts",
    "created",
    "updated",
    "retention_ms",
    "retain_until",
    "outcome_status",
    "outcome_body",
    "outcome_error",
    "holder_run_id",
    "holder_trigger",
    "holder_attempt",
    "holder_host",
    "holder_pid",
    "operation",
    "holder_token",
    "effect_atomic",
];

/// [`COLUMNS`] joined for SQL, each behind `prefix` (`"r."`, or `""`).
pub fn column_list(prefix: &str) -> String {
    COLUMNS
        .iter()
        .map(|c| format!("{prefix}{c}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Reads one named column of a row; an error is the client's message.
/// Every SQL integer is read as `i64` (SQLite's one integer type; the
/// PostgreSQL columns are `bigint`, `outcome_status` read through
/// [`ColumnReader::opt_i32`]).
pub trait ColumnReader {
    /// A `text` column, `None` when NULL.
    fn opt_text(&self, column: &str) -> Result<Option<String>, String>;
    /// A `bytea`/`BLOB` column, `None` when NULL.
    fn opt_bytes(&self, column: &str) -> Result<Option<Vec<u8>>, String>;
    /// A `bigint`/`INTEGER` column, `None` when NULL.
    fn opt_i64(&self, column: &str) -> Result<Option<i64>, String>;
    /// An `integer` (32-bit) column, `None` when NULL.
    fn opt_i32(&self, column: &str) -> Result<Option<i32>, String>;
    /// A `boolean` column (SQLite: an `INTEGER` 0 or 1), `None` when NULL.
    fn opt_bool(&self, column: &str) -> Result<Option<bool>, String>;
}

/// A record's columns as plain SQL values, in [`COLUMNS`] order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordRow {
    pub namespace: String,
    pub key: Vec<u8>,
    pub policy_digest: String,
    pub fingerprint: Vec<u8>,
    pub partition: String,
    pub state: &'static str,
    pub fence: i64,
    pub lease_until: i64,
    pub attempts: i64,
    pub created: i64,
    pub updated: i64,
    pub retention_ms: i64,
    pub retain_until: i64,
    pub outcome_status: Option<i32>,
    pub outcome_body: Option<Vec<u8>>,
    pub outcome_error: Option<String>,
    pub holder_run_id: Option<String>,
    pub holder_trigger: Option<String>,
    pub holder_attempt: Option<i64>,
    pub holder_host: String,
    pub holder_pid: i64,
    pub operation: Option<String>,
    pub holder_token: Option<Vec<u8>>,
    pub effect_atomic: bool,
}

/// The row values in [`COLUMNS`] order, as trait objects of a client's
/// parameter trait: `record_values!(row, dyn rusqlite::ToSql)`.
macro_rules! record_values {
    ($row:expr, $param:ty) => {{
        let r = $row;
        let values: [&$param; 24] = [
            &r.namespace,
            &r.key,
            &r.policy_digest,
            &r.fingerprint,
            &r.partition,
            &r.state,
            &r.fence,
            &r.lease_until,
            &r.attempts,
            &r.created,
            &r.updated,
            &r.retention_ms,
            &r.retain_until,
            &r.outcome_status,
            &r.outcome_body,
            &r.outcome_error,
            &r.holder_run_id,
            &r.holder_trigger,
            &r.holder_attempt,
            &r.holder_host,
            &r.holder_pid,
            &r.operation,
            &r.holder_token,
            &r.effect_atomic,
        ];
        values
    }};
}
pub(crate) use record_values;

impl RecordRow {
    /// The row for a record; a time that does not fit a SQL integer is an
    /// invalid request (times are clamped well below that).
    pub fn of(r: &Record) -> Result<RecordRow, StoreError> {
        let int = |v: u64, what: &str| {
            i64::try_from(v).map_err(|_| {
                StoreError::InvalidRequest(format!("{what} {v} does not fit the store"))
            })
        };
        let outcome = r.outcome.as_ref();
        Ok(RecordRow {
            namespace: r.key.namespace.clone(),
            key: r.key.digest.0.to_vec(),
            policy_digest: r.policy_digest.clone(),
            fingerprint: r.fingerprint.0.to_vec(),
            partition: r.partition.clone(),
            state: r.state.as_str(),
            fence: int(r.fence, "fence")?,
            lease_until: int(r.lease_until_ms, "lease_until")?,
            attempts: i64::from(r.attempts),
            created: int(r.created_ms, "created")?,
            updated: int(r.updated_ms, "updated")?,
            retention_ms: int(r.retention_ms, "retention")?,
            retain_until: int(r.retain_until_ms, "retain_until")?,
            outcome_status: outcome.map(|o| o.status),
            outcome_body: outcome.map(|o| o.body.clone()),
            outcome_error: outcome.and_then(|o| o.error.clone()),
            holder_run_id: r.holder.run_id.clone(),
            holder_trigger: r.holder.trigger.clone(),
            holder_attempt: r.holder.attempt.map(i64::from),
            holder_host: r.holder.host.clone(),
            holder_pid: i64::from(r.holder.pid),
            operation: r.operation.as_ref().map(KeptOperation::to_column),
            holder_token: r.holder.token.map(|t| t.0.to_vec()),
            effect_atomic: r.effect_atomic,
        })
    }
}

/// Decodes the record in `row`'s columns named `{prefix}{column}`; `None`
/// when its namespace is NULL (a LEFT JOIN that matched nothing). What does
/// not decode is [`StoreError::Corrupt`] in `store`, naming the column.
pub fn decode(
    row: &impl ColumnReader,
    prefix: &str,
    store: &str,
) -> Result<Option<Record>, StoreError> {
    let corrupt = |what: String| StoreError::Corrupt {
        store: store.to_string(),
        what,
    };
    // The plain names (every read but a batch's debug check) allocate nothing.
    let name = |column: &'static str| -> Cow<'static, str> {
        if prefix.is_empty() {
            Cow::Borrowed(column)
        } else {
            Cow::Owned(format!("{prefix}{column}"))
        }
    };
    let read_err = |column: &'static str, e: String| corrupt(format!("column {column}: {e}"));
    let required = |column: &'static str| corrupt(format!("column {column} is NULL"));
    let text = |column: &'static str| {
        row.opt_text(&name(column))
            .map_err(|e| read_err(column, e))?
            .ok_or_else(|| required(column))
    };
    let int = |column: &'static str| {
        row.opt_i64(&name(column))
            .map_err(|e| read_err(column, e))?
            .ok_or_else(|| required(column))
    };
    let unsigned = |column: &'static str| {
        let v = int(column)?;
        u64::try_from(v).map_err(|_| corrupt(format!("{column} is {v}")))
    };
    let small =
        |v: i64, column: &str| u32::try_from(v).map_err(|_| corrupt(format!("{column} is {v}")));
    let digest = |column: &'static str| {
        let bytes = row
            .opt_bytes(&name(column))
            .map_err(|e| read_err(column, e))?
            .ok_or_else(|| required(column))?;
        <[u8; 32]>::try_from(bytes.as_slice())
            .map(Digest)
            .map_err(|_| corrupt(format!("{column} is {} bytes, not 32", bytes.len())))
    };

    let Some(namespace) = row
        .opt_text(&name("namespace"))
        .map_err(|e| read_err("namespace", e))?
    else {
        return Ok(None);
    };
    let key = RecordKey {
        namespace,
        digest: digest("key")?,
    };
    let state: RecordState = text("state")?
        .parse()
        .map_err(|e: String| corrupt(format!("record {key}: {e}")))?;
    let status = row
        .opt_i32(&name("outcome_status"))
        .map_err(|e| read_err("outcome_status", e))?;
    let outcome = match status {
        None => None,
        Some(status) => Some(Outcome {
            status,
            body: row
                .opt_bytes(&name("outcome_body"))
                .map_err(|e| read_err("outcome_body", e))?
                .unwrap_or_default(),
            error: row
                .opt_text(&name("outcome_error"))
                .map_err(|e| read_err("outcome_error", e))?,
        }),
    };
    let pid = small(int("holder_pid")?, "holder_pid")?;
    let attempt = row
        .opt_i64(&name("holder_attempt"))
        .map_err(|e| read_err("holder_attempt", e))?;
    let token = row
        .opt_bytes(&name("holder_token"))
        .map_err(|e| read_err("holder_token", e))?
        .map(|bytes| {
            HolderToken::from_slice(&bytes).ok_or_else(|| {
                corrupt(format!(
                    "record {key}: holder_token is {} bytes, not 16",
                    bytes.len()
                ))
            })
        })
        .transpose()?;
    let operation = row
        .opt_text(&name("operation"))
        .map_err(|e| read_err("operation", e))?
        .map(|text| KeptOperation::from_column(&text))
        .transpose()
        .map_err(|e| corrupt(format!("record {key}: {e}")))?;
    let effect_atomic = row
        .opt_bool(&name("effect_atomic"))
        .map_err(|e| read_err("effect_atomic", e))?
        .ok_or_else(|| required("effect_atomic"))?;
    Ok(Some(Record {
        policy_digest: text("policy_digest")?,
        fingerprint: digest("fingerprint")?,
        partition: text("partition")?,
        state,
        fence: unsigned("fence")?,
        lease_until_ms: unsigned("lease_until")?,
        attempts: small(int("attempts")?, "attempts")?,
        created_ms: unsigned("created")?,
        updated_ms: unsigned("updated")?,
        retention_ms: unsigned("retention_ms")?,
        retain_until_ms: unsigned("retain_until")?,
        outcome,
        holder: Holder {
            run_id: row
                .opt_text(&name("holder_run_id"))
                .map_err(|e| read_err("holder_run_id", e))?,
            trigger: row
                .opt_text(&name("holder_trigger"))
                .map_err(|e| read_err("holder_trigger", e))?,
            attempt: attempt.map(|a| small(a, "holder_attempt")).transpose()?,
            host: text("holder_host")?,
            pid,
            // Pid 0 is how every store keeps a caller that named itself.
            named: pid == 0,
            token,
        },
        operation,
        effect_atomic,
        key,
    }))
}

/// The `attempts` columns written by a store, in the order every statement
/// lists them (the `id` is the table's own).
pub const ATTEMPT_COLUMNS: [&str; 14] = [
    "namespace",
    "key",
    "fence",
    "event",
    "run_id",
    "trigger",
    "attempt",
    "host",
    "pid",
    "at_ms",
    "policy_digest",
    "operation_digest",
    "actor",
    "detail",
];

/// [`ATTEMPT_COLUMNS`] joined for SQL.
pub fn attempt_column_list() -> String {
    ATTEMPT_COLUMNS.join(", ")
}

/// An attempt-log entry's columns as plain SQL values, in
/// [`ATTEMPT_COLUMNS`] order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptRow {
    pub namespace: String,
    pub key: Vec<u8>,
    pub fence: i64,
    pub event: &'static str,
    pub run_id: Option<String>,
    pub trigger: Option<String>,
    pub attempt: Option<i64>,
    pub host: Option<String>,
    pub pid: Option<i64>,
    pub at_ms: i64,
    pub policy_digest: Option<String>,
    pub operation_digest: Option<Vec<u8>>,
    pub actor: Option<String>,
    pub detail: Option<String>,
}

/// The entry values in [`ATTEMPT_COLUMNS`] order, as trait objects of a
/// client's parameter trait.
macro_rules! attempt_values {
    ($row:expr, $param:ty) => {{
        let a = $row;
        let values: [&$param; 14] = [
            &a.namespace,
            &a.key,
            &a.fence,
            &a.event,
            &a.run_id,
            &a.trigger,
            &a.attempt,
            &a.host,
            &a.pid,
            &a.at_ms,
            &a.policy_digest,
            &a.operation_digest,
            &a.actor,
            &a.detail,
        ];
        values
    }};
}
pub(crate) use attempt_values;

impl AttemptRow {
    /// The row of `entry`, stamped `at_ms` (the transaction's store clock).
    pub fn of(entry: &AttemptEntry, at_ms: u64) -> AttemptRow {
        let int = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        let holder = entry.holder.as_ref();
        AttemptRow {
            namespace: entry.key.namespace.clone(),
            key: entry.key.digest.0.to_vec(),
            fence: int(entry.fence),
            event: entry.event.as_str(),
            run_id: holder.and_then(|h| h.run_id.clone()),
            trigger: holder.and_then(|h| h.trigger.clone()),
            attempt: holder.and_then(|h| h.attempt).map(i64::from),
            host: holder.map(|h| h.host.clone()),
            pid: holder.map(|h| i64::from(h.pid)),
            at_ms: int(at_ms),
            policy_digest: entry.policy_digest.clone(),
            operation_digest: entry.operation_digest.map(|d| d.0.to_vec()),
            actor: entry.actor.clone(),
            detail: entry.detail.clone(),
        }
    }
}

/// Decodes an attempt-log row (`id` and every [`ATTEMPT_COLUMNS`] column).
pub fn decode_attempt(row: &impl ColumnReader, store: &str) -> Result<AttemptEntry, StoreError> {
    let corrupt = |what: String| StoreError::Corrupt {
        store: store.to_string(),
        what: format!("attempt log: {what}"),
    };
    let read_err = |column: &str, e: String| corrupt(format!("column {column}: {e}"));
    let opt_text = |column: &str| row.opt_text(column).map_err(|e| read_err(column, e));
    let opt_int = |column: &str| row.opt_i64(column).map_err(|e| read_err(column, e));
    let unsigned = |column: &str| {
        let v = opt_int(column)?.ok_or_else(|| corrupt(format!("column {column} is NULL")))?;
        u64::try_from(v).map_err(|_| corrupt(format!("{column} is {v}")))
    };
    let small =
        |v: i64, column: &str| u32::try_from(v).map_err(|_| corrupt(format!("{column} is {v}")));
    let digest = |column: &str| -> Result<Option<Digest>, StoreError> {
        let Some(bytes) = row.opt_bytes(column).map_err(|e| read_err(column, e))? else {
            return Ok(None);
        };
        <[u8; 32]>::try_from(bytes.as_slice())
            .map(|d| Some(Digest(d)))
            .map_err(|_| corrupt(format!("{column} is {} bytes, not 32", bytes.len())))
    };
    let namespace =
        opt_text("namespace")?.ok_or_else(|| corrupt("column namespace is NULL".into()))?;
    let key = RecordKey {
        namespace,
        digest: digest("key")?.ok_or_else(|| corrupt("column key is NULL".into()))?,
    };
    let event: AttemptEvent = opt_text("event")?
        .ok_or_else(|| corrupt("column event is NULL".into()))?
        .parse()
        .map_err(corrupt)?;
    let holder = match opt_text("host")? {
        None => None,
        Some(host) => {
            // Host and pid are written together, from one holder; pid 0 is
            // a caller that named itself. A NULL pid beside a host was
            // never written so, and never meant a name: the log predates
            // named callers, where a holder was always a process, so it
            // reads as a process whose pid is not known (`host:0`).
            let pid = opt_int("pid")?;
            Some(Holder {
                run_id: opt_text("run_id")?,
                trigger: opt_text("trigger")?,
                attempt: opt_int("attempt")?
                    .map(|a| small(a, "attempt"))
                    .transpose()?,
                host,
                pid: small(pid.unwrap_or(0), "pid")?,
                named: pid == Some(0),
                token: None,
            })
        }
    };
    Ok(AttemptEntry {
        id: unsigned("id")?,
        key,
        fence: unsigned("fence")?,
        event,
        holder,
        at_ms: unsigned("at_ms")?,
        policy_digest: opt_text("policy_digest")?,
        operation_digest: digest("operation_digest")?,
        actor: opt_text("actor")?,
        detail: opt_text("detail")?,
    })
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    /// An attempt-log row as plain values: text, or an integer; a column
    /// left out is NULL.
    struct Row(HashMap<&'static str, Result<String, i64>>);

    impl ColumnReader for Row {
        fn opt_text(&self, column: &str) -> Result<Option<String>, String> {
            Ok(self.0.get(column).and_then(|v| v.clone().ok()))
        }
        fn opt_bytes(&self, column: &str) -> Result<Option<Vec<u8>>, String> {
            Ok((column == "key").then(|| vec![7; 32]))
        }
        fn opt_i64(&self, column: &str) -> Result<Option<i64>, String> {
            Ok(self.0.get(column).and_then(|v| v.clone().err()))
        }
        fn opt_i32(&self, column: &str) -> Result<Option<i32>, String> {
            Ok(self.opt_i64(column)?.map(|v| v as i32))
        }
        fn opt_bool(&self, _: &str) -> Result<Option<bool>, String> {
            Ok(None)
        }
    }

    fn entry_with_pid(pid: Option<i64>) -> AttemptEntry {
        let mut columns = HashMap::from([
            ("id", Err(1)),
            ("namespace", Ok("ns".to_string())),
            ("event", Ok("executed".to_string())),
            ("fence", Err(1)),
            ("at_ms", Err(10)),
            ("host", Ok("web-3".to_string())),
        ]);
        if let Some(pid) = pid {
            columns.insert("pid", Err(pid));
        }
        decode_attempt(&Row(columns), "test").expect("the row decodes")
    }

    #[test]
    fn a_null_pid_is_a_process_whose_pid_is_unknown_never_a_named_caller() {
        let legacy = entry_with_pid(None).holder.expect("a holder");
        assert!(!legacy.is_named());
        assert_eq!(legacy.who(), "web-3:0");
        let named = entry_with_pid(Some(0)).holder.expect("a holder");
        assert!(named.is_named());
        assert_eq!(named.who(), "web-3");
        let process = entry_with_pid(Some(4242)).holder.expect("a holder");
        assert!(!process.is_named());
        assert_eq!(process.who(), "web-3:4242");
    }
}
