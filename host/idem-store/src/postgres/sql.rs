//! The pieces of SQL the PostgreSQL store's statements share: the store
//! clock, "counts as absent", a fresh record's values, a finish's, the
//! attempt log's columns, the schema's quoted name. `statements/`
//! assembles every statement from them.

use super::url;
use crate::codec;

/// The SQL type of each of the record columns' parameters
/// ([`codec::COLUMNS`] order). A parameter written to
/// a column is cast to it: left to the server, a parameter written to a
/// domain column would be typed as the domain, which the client's types
/// do not accept.
pub(super) const COLUMN_TYPES: [&str; 24] = [
    "text", "bytea", "text", "bytea", "text", "text", "int8", "int8", "int8", "int8", "int8",
    "int8", "int8", "int4", "bytea", "text", "text", "text", "int8", "text", "int8", "text",
    "bytea", "bool",
];

/// The parameter after a record's columns: the expected fence of an
/// update, or the first attempt-log value of an insert.
pub(super) const AFTER_COLUMNS: usize = COLUMN_TYPES.len() + 1;

/// The store clock in ms, in SQL: `$1` pins it (a manual clock), else the
/// server's clock plus `$2`. `clock_timestamp()`, not `now()`: `now()` is
/// the transaction's start, before the row lock was granted.
pub(super) const NOW: &str =
    "COALESCE($1::int8, floor(extract(epoch FROM clock_timestamp()) * 1000)::int8 + $2::int8)";

/// "Counts as absent" (see `machine::is_expired`) for a row `r` at `n.ms`.
pub(super) const EXPIRED: &str =
    "(r.retain_until < n.ms AND NOT (r.state = 'in-progress' AND r.lease_until > n.ms))";

/// Largest time a store holds (`machine::MAX_TIME_MS`), for the fast claim.
pub(super) const MAX_TIME: &str = "9223372036854775807";

/// The SQL expressions a fresh claim's row is made of.
pub(super) struct Fresh<'a> {
    pub namespace: &'a str,
    pub key: &'a str,
    pub policy_digest: &'a str,
    pub fingerprint: &'a str,
    pub partition: &'a str,
    /// The lease, ms.
    pub lease: &'a str,
    /// The retention, ms.
    pub retention: &'a str,
    pub run_id: &'a str,
    pub trigger: &'a str,
    pub attempt: &'a str,
    pub host: &'a str,
    pub pid: &'a str,
    /// The kept operation's column text.
    pub operation: &'a str,
    /// The claim attempt's token.
    pub token: &'a str,
    /// Whether its effect commits with its end.
    pub effect_atomic: &'a str,
    /// The new fence.
    pub fence: &'a str,
    /// The store clock, ms.
    pub now: &'a str,
}

/// A fresh claim's row in [`codec::COLUMNS`] order, as `machine::new_record`
/// makes it: in progress, attempt 1, created and updated now, `lease_until
/// = now + lease`, `retain_until = max(now + retention, lease_until)`, both
/// clamped to the largest time a store holds; no outcome. (Checked against
/// the machine after every fast claim in debug builds.)
pub(super) fn fresh_record(v: &Fresh<'_>) -> String {
    let lease_until = format!("LEAST({}::numeric + {}, {MAX_TIME})", v.now, v.lease);
    let retain_until = format!(
        "GREATEST(LEAST({}::numeric + {}, {MAX_TIME}), {lease_until})::int8",
        v.now, v.retention
    );
    format!(
        "{}, {}, {}, {}, {}, 'in-progress', {}, {lease_until}::int8, 1, {now}, {now}, {}, \
         {retain_until}, NULL, NULL, NULL, {}, {}, {}, {}, {}, {}, {}, {}",
        v.namespace,
        v.key,
        v.policy_digest,
        v.fingerprint,
        v.partition,
        v.fence,
        v.retention,
        v.run_id,
        v.trigger,
        v.attempt,
        v.host,
        v.pid,
        v.operation,
        v.token,
        v.effect_atomic,
        now = v.now,
    )
}

/// The `SET` list of a holder's finish on a row `r` at `n.ms`, as
/// `machine::finish` makes it: the new state and outcome, updated now, kept
/// for its retention from now (clamped). (Checked against the machine after
/// every fast finish in debug builds.)
pub(super) fn finished_values(state: &str, status: &str, body: &str, error: &str) -> String {
    format!(
        "state = {state}, outcome_status = {status}, outcome_body = {body}, \
         outcome_error = {error}, updated = n.ms, \
         retain_until = CASE WHEN r.retention_ms > {MAX_TIME} - n.ms \
           THEN {MAX_TIME} ELSE n.ms + r.retention_ms END"
    )
}

/// The condition under which a holder may finish a row `r` at `n.ms`
/// (`machine::held`): its key, its fence, in progress, and live.
pub(super) fn held_by(namespace: &str, key: &str, fence: &str) -> String {
    format!(
        "r.namespace = {namespace} AND r.key = {key} AND r.fence = {fence} \
         AND r.state = 'in-progress' AND NOT {EXPIRED}"
    )
}

/// The SQL type of each attempt-log column's parameter
/// ([`codec::ATTEMPT_COLUMNS`] order).
const ATTEMPT_TYPES: [&str; 14] = [
    "text", "bytea", "int8", "text", "text", "text", "int8", "text", "int8", "int8", "text",
    "bytea", "text", "text",
];

/// Placeholders for one attempt-log entry's values, from `$first`.
pub(super) fn attempt_placeholders(first: usize) -> String {
    ATTEMPT_TYPES
        .iter()
        .enumerate()
        .map(|(i, t)| format!("${}::{t}", first + i))
        .collect::<Vec<_>>()
        .join(", ")
}

/// What a write statement's row `table` hands on to its log entry: in
/// debug builds every column (the caller's final SELECT may need them
/// all for the machine check), else only those the entry is made of.
pub(super) fn logged_columns(table: &str) -> String {
    if cfg!(debug_assertions) {
        codec::column_list(table)
    } else {
        [
            "namespace",
            "key",
            "fence",
            "state",
            "created",
            "updated",
            "policy_digest",
            "holder_run_id",
            "holder_trigger",
            "holder_attempt",
            "holder_host",
            "holder_pid",
        ]
        .iter()
        .map(|c| format!("{table}{c}"))
        .collect::<Vec<_>>()
        .join(", ")
    }
}

/// An attempt-log entry's values ([`codec::ATTEMPT_COLUMNS`] order) made
/// of a written record row `w` (prefix `table`): its key, fence and
/// holder; `event` and `at` as SQL expressions; `operation_digest` a
/// parameter or NULL; no detail.
pub(super) fn logged_entry(table: &str, event: &str, at: &str, operation_digest: &str) -> String {
    logged_entry_with(table, event, at, operation_digest, "NULL::text")
}

/// [`logged_entry`] with `detail` (an SQL expression).
fn logged_entry_with(
    table: &str,
    event: &str,
    at: &str,
    operation_digest: &str,
    detail: &str,
) -> String {
    let t = table;
    format!(
        "{t}namespace, {t}key, {t}fence, {event}, {t}holder_run_id, {t}holder_trigger, \
         {t}holder_attempt, {t}holder_host, {t}holder_pid, {at}, {t}policy_digest, \
         {operation_digest}, NULL::text, {detail}"
    )
}

/// The attempt-log CTE of a finish whose updated rows are `w` (nothing
/// without `log`), to sit between the update and the final `SELECT`; `w`
/// carries the entry's `detail` (a failure's error text, cut).
pub(super) fn log_finished(s: &str, log: bool) -> String {
    if !log {
        return String::new();
    }
    format!(
        ", lg AS (INSERT INTO {s}.attempts ({}) SELECT {} FROM w)",
        codec::attempt_column_list(),
        logged_entry_with("w.", "w.state", "w.updated", "NULL::bytea", "w.detail"),
    )
}

/// What a fast write returns: in debug builds the whole row (prefixed by
/// `table`), for the executor to check against the machine; else
/// only `release`.
pub(super) fn written_columns(table: &str, release: &str) -> String {
    if cfg!(debug_assertions) {
        codec::column_list(table)
    } else {
        release.to_string()
    }
}

/// A checked schema name as an SQL identifier.
pub(super) fn quote(schema: &str) -> String {
    debug_assert!(url::check_schema(schema).is_ok(), "{schema}");
    format!("\"{schema}\"")
}
