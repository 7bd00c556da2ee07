//! Every SQL statement of the PostgreSQL store, built once per schema. The
//! schema's quoted name is the one identifier interpolated into them (see
//! the test at the end); every value is a bound parameter.

use super::{batch_claim, batch_finish, url};
use crate::codec::{self, COLUMNS};

/// The SQL type of each of the record columns' parameters
/// ([`codec::COLUMNS`] order). A parameter written to
/// a column is cast to it: left to the server, a parameter written to a
/// domain column would be typed as the domain, which the client's types
/// do not accept.
const COLUMN_TYPES: [&str; 23] = [
    "text", "bytea", "text", "bytea", "text", "text", "int8", "int8", "int8", "int8", "int8",
    "int8", "int8", "int4", "bytea", "text", "text", "text", "int8", "text", "int8", "text",
    "bytea",
];

/// The parameter after a record's columns: the expected fence of an
/// update, or the first attempt-log value of an insert.
const AFTER_COLUMNS: usize = COLUMN_TYPES.len() + 1;

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

/// The SQL of one schema, built once.
#[derive(Debug)]
pub(super) struct Sql {
    pub(super) lock: String,
    pub(super) now: String,
    pub(super) now_and_fence: String,
    pub(super) insert: String,
    pub(super) update: String,
    pub(super) fast_claim: String,
    pub(super) fast_claim_owned: String,
    pub(super) batch_claim: String,
    pub(super) get: String,
    pub(super) list: String,
    pub(super) gc: String,
    pub(super) epoch_for_share: String,
    pub(super) join: String,
    pub(super) membership: String,
    pub(super) job_acquire: String,
    pub(super) job_get: String,
    pub(super) job_heartbeat: String,
    pub(super) job_release: String,
    pub(super) finish_fast: String,
    pub(super) finish_batch: String,
    pub(super) insert_logged: String,
    pub(super) update_logged: String,
    pub(super) append_refused: String,
    pub(super) append_many: String,
    pub(super) attempts: String,
    /// One record's timeline: an equality on the key index (written as
    /// `$2 IS NULL OR key = $3`, a generic plan could not use it).
    pub(super) attempts_by_key: String,
    pub(super) registry: super::registry::RegistrySql,
}

impl Sql {
    /// Every statement of the store whose (checked) schema is `schema`;
    /// without `log`, the one-statement writes leave the attempt log out.
    pub(super) fn new(schema: &str, log: bool) -> Sql {
        let s = quote(schema);
        let fence_seq = format!("'{s}.fence_seq'");
        let epoch_seq = format!("'{s}.epoch_seq'");
        let placeholders = COLUMN_TYPES
            .iter()
            .enumerate()
            .map(|(i, t)| format!("${}::{t}", i + 1))
            .collect::<Vec<_>>()
            .join(", ");
        let set = COLUMNS
            .iter()
            .zip(COLUMN_TYPES)
            .enumerate()
            .skip(2)
            .map(|(i, (c, t))| format!("{c} = ${}::{t}", i + 1))
            .collect::<Vec<_>>()
            .join(", ");
        let columns = codec::column_list("");
        let r_columns = codec::column_list("r.");
        // `$3`/`$4` are the clock parameters where `$1`/`$2` are taken.
        let now34 = NOW.replace("$1", "$3").replace("$2", "$4");
        // A fresh claim's insert, from `n` (its clock and fence).
        let fresh_insert = format!(
            "INSERT INTO {s}.records ({columns}) SELECT {} FROM n \
             ON CONFLICT (namespace, key) DO NOTHING RETURNING {}",
            fresh_record(&Fresh {
                namespace: "$1::text",
                key: "$2::bytea",
                policy_digest: "$3::text",
                fingerprint: "$4::bytea",
                partition: "$5::text",
                lease: "$6::int8",
                retention: "$7::int8",
                run_id: "$8::text",
                trigger: "$9::text",
                attempt: "$10::int8",
                host: "$11::text",
                pid: "$12::int8",
                operation: "$OP::text",
                token: "$TOKEN::bytea",
                fence: "n.fence",
                now: "n.ms",
            }),
            logged_columns(""),
        );
        let attempt_columns = codec::attempt_column_list();
        let attempts_rest = "($3::int8 IS NULL OR at_ms >= $3) AND ($4::int8 IS NULL OR at_ms < $4) \
             AND ($5::int8 IS NULL OR id > $5) ORDER BY id LIMIT $6::int8";
        // The fresh claim's `executed` entry, from the inserted row `ins`
        // and the operation digest `$op`.
        let log_fresh = |op: &str| {
            let entry = if log {
                format!(
                    "lg AS (INSERT INTO {s}.attempts ({attempt_columns}) \
                     SELECT {} FROM ins), ",
                    logged_entry("ins.", "'executed'", "ins.created", op),
                )
            } else {
                // The parameter is still bound: keep its type known.
                format!("lg AS (SELECT {op}), ")
            };
            format!(
                "{entry}x AS (SELECT 1) SELECT {} FROM ins",
                written_columns("", "fence, created"),
            )
        };

        Sql {
            lock: format!(
                "SELECT {columns} FROM {s}.records WHERE namespace = $1 AND key = $2 FOR UPDATE"
            ),
            now: format!("SELECT {NOW}, NULL::int8"),
            now_and_fence: format!("SELECT {NOW}, nextval({fence_seq})"),
            insert: format!(
                "INSERT INTO {s}.records ({columns}) VALUES ({placeholders}) ON CONFLICT (namespace, key) DO NOTHING"
            ),
            update: format!(
                "UPDATE {s}.records SET {set} WHERE namespace = $1 AND key = $2 AND fence = ${AFTER_COLUMNS}"
            ),
            fast_claim: format!(
                "WITH n AS (SELECT {} AS ms, nextval({fence_seq}) AS fence), \
                 ins AS ({fresh_insert}), {}",
                NOW.replace("$1", "$13").replace("$2", "$14"),
                log_fresh("$15::bytea"),
            )
            .replace("$OP", "$16")
            .replace("$TOKEN", "$17"),
            // The same under an ownership token ($15 group, $16 epoch): it
            // inserts only while the epoch is current, holding the
            // membership row FOR SHARE until commit so that a membership
            // change waits for it; when it inserts nothing, the transaction
            // path says why. A statement of its own: naming the membership
            // table would cost every claim that has no token its lock and
            // executor set-up, for a check it does not make.
            fast_claim_owned: format!(
                "WITH m AS (SELECT epoch FROM {s}.memberships WHERE grp = $15::text FOR SHARE), \
                 n AS (SELECT {} AS ms, nextval({fence_seq}) AS fence \
                   WHERE EXISTS (SELECT 1 FROM m WHERE m.epoch = $16::int8)), \
                 ins AS ({fresh_insert}), {}",
                NOW.replace("$1", "$13").replace("$2", "$14"),
                log_fresh("$17::bytea"),
            )
            .replace("$OP", "$18")
            .replace("$TOKEN", "$19"),
            batch_claim: batch_claim::claim_sql(&s, &fence_seq, log),
            get: format!(
                "SELECT n.ms, {r_columns} FROM (SELECT {now34} AS ms) n \
                 LEFT JOIN {s}.records r ON r.namespace = $1 AND r.key = $2"
            ),
            // The clock is read once (MATERIALIZED), the row for it is kept
            // even when nothing matches (LEFT JOIN), so `now` is always known.
            list: format!(
                "WITH n AS MATERIALIZED (SELECT {NOW} AS ms) \
                 SELECT n.ms, {r_columns} FROM n LEFT JOIN LATERAL ( \
                   SELECT r.* FROM {s}.records r WHERE NOT {EXPIRED} \
                   AND ($3::text IS NULL OR r.namespace = $3) AND ($4::text IS NULL OR r.partition = $4) \
                   AND ($5::text IS NULL OR r.state = $5) \
                   ORDER BY r.updated DESC, r.namespace COLLATE \"C\", r.key LIMIT $6::int8 \
                 ) r ON true ORDER BY r.updated DESC, r.namespace COLLATE \"C\", r.key"
            ),
            // Up to $3 records and, in the same statement, their log
            // entries. SKIP LOCKED: a record a claim is replacing right
            // now is left to that claim (or to the next gc).
            gc: format!(
                "WITH n AS MATERIALIZED (SELECT {NOW} AS ms), \
                 v AS (SELECT r.namespace, r.key FROM {s}.records r, n WHERE {EXPIRED} \
                   LIMIT $3::int8 FOR UPDATE OF r SKIP LOCKED), \
                 d AS (DELETE FROM {s}.records r USING v \
                   WHERE r.namespace = v.namespace AND r.key = v.key \
                   RETURNING r.namespace, r.key), \
                 la AS (DELETE FROM {s}.attempts a USING d \
                   WHERE a.namespace = d.namespace AND a.key = d.key) \
                 SELECT count(*)::int8 FROM d"
            ),
            // FOR SHARE: a membership change (which updates the row) waits
            // for this claim's transaction, so the claim is ordered before
            // or after it, never across it.
            epoch_for_share: format!("SELECT epoch FROM {s}.memberships WHERE grp = $1 FOR SHARE"),
            // One statement: the row lock of the upsert serialises joiners;
            // the epoch moves (store-wide sequence) only when the members
            // differ. The sequence value drawn for the insert attempt is lost
            // on conflict: epochs may skip values, never go back.
            join: format!(
                "INSERT INTO {s}.memberships AS m (grp, epoch, members, updated) \
                 SELECT $1::text, nextval({epoch_seq}), $2::text[], {now34} \
                 ON CONFLICT (grp) DO UPDATE SET \
                   epoch = CASE WHEN m.members = EXCLUDED.members THEN m.epoch ELSE nextval({epoch_seq}) END, \
                   updated = CASE WHEN m.members = EXCLUDED.members THEN m.updated ELSE EXCLUDED.updated END, \
                   members = EXCLUDED.members \
                 RETURNING epoch, members"
            ),
            membership: format!("SELECT epoch, members FROM {s}.memberships WHERE grp = $1"),
            // Takes the lease when absent, or when it ended by the store
            // clock (`acquired` holds this statement's "now").
            job_acquire: format!(
                "INSERT INTO {s}.job_leases AS j (job, holder, fence, lease_until, acquired) \
                 SELECT $1::text, $2::text, nextval({fence_seq}), \
                   LEAST(n.ms::numeric + $5::int8, {MAX_TIME})::int8, n.ms \
                 FROM (SELECT {now34} AS ms) n \
                 ON CONFLICT (job) DO UPDATE SET holder = EXCLUDED.holder, fence = EXCLUDED.fence, \
                   lease_until = EXCLUDED.lease_until, acquired = EXCLUDED.acquired \
                 WHERE j.lease_until <= EXCLUDED.acquired \
                 RETURNING fence, lease_until"
            ),
            job_get: format!(
                "SELECT n.ms, j.holder, j.fence, j.lease_until FROM (SELECT {} AS ms) n \
                 LEFT JOIN {s}.job_leases j ON j.job = $1",
                NOW.replace("$2", "$3").replace("$1", "$2")
            ),
            job_heartbeat: format!(
                "UPDATE {s}.job_leases j SET lease_until = LEAST(n.ms::numeric + $5::int8, {MAX_TIME})::int8 \
                 FROM (SELECT {now34} AS ms) n WHERE j.job = $1 AND j.fence = $2 RETURNING j.lease_until"
            ),
            job_release: format!("DELETE FROM {s}.job_leases WHERE job = $1 AND fence = $2"),
            // A holder's completion or failure in one autocommit statement;
            // when it changes nothing, the locked path finds out why.
            finish_batch: batch_finish::finish_sql(&s, log),
            finish_fast: format!(
                "WITH n AS (SELECT {NOW} AS ms), \
                 w AS (UPDATE {s}.records AS r SET {} FROM n WHERE {} RETURNING {}) \
                 {} SELECT {} FROM w",
                finished_values("$5::text", "$6::int4", "$7::bytea", "$8::text"),
                held_by("$3", "$4", "$9"),
                logged_columns("r."),
                log_finished(&s, log),
                written_columns("", "fence, updated"),
            ),
            insert_logged: format!(
                "WITH w AS (INSERT INTO {s}.records ({columns}) VALUES ({placeholders}) \
                   ON CONFLICT (namespace, key) DO NOTHING RETURNING 1) \
                 INSERT INTO {s}.attempts ({attempt_columns}) SELECT {} FROM w",
                attempt_placeholders(AFTER_COLUMNS),
            ),
            update_logged: format!(
                "WITH w AS (UPDATE {s}.records SET {set} WHERE namespace = $1 AND key = $2 \
                   AND fence = ${AFTER_COLUMNS} RETURNING 1) \
                 INSERT INTO {s}.attempts ({attempt_columns}) SELECT {} FROM w",
                attempt_placeholders(AFTER_COLUMNS + 1),
            ),
            // A refused late write, once per key, fence and reason: its
            // retries add nothing, and repeating one cannot grow the log.
            append_refused: format!(
                "INSERT INTO {s}.attempts ({attempt_columns}) \
                 SELECT $1::text, $2::bytea, $3::int8, $4::text, $5::text, $6::text, $7::int8, \
                   $8::text, $9::int8, $10::int8, $11::text, $12::bytea, $13::text, $14::text \
                 WHERE NOT EXISTS (SELECT 1 FROM {s}.attempts WHERE namespace = $1 \
                   AND key = $2 AND fence = $3 AND event = $4 \
                   AND detail IS NOT DISTINCT FROM $14)"
            ),
            // Answers to duplicates, each at the time it was given; one
            // about a record gc removed meanwhile is left out (see
            // `Store::log_answers`).
            append_many: format!(
                "INSERT INTO {s}.attempts ({attempt_columns}) \
                 SELECT u.* FROM unnest($1::text[], $2::bytea[], $3::int8[], $4::text[], \
                   $5::text[], $6::text[], $7::int8[], $8::text[], $9::int8[], $10::int8[], \
                   $11::text[], $12::bytea[], $13::text[], $14::text[]) AS u ({attempt_columns}) \
                 WHERE EXISTS (SELECT 1 FROM {s}.records r \
                   WHERE r.namespace = u.namespace AND r.key = u.key)"
            ),
            registry: super::registry::RegistrySql::new(&s),
            attempts: format!(
                "SELECT id, {attempt_columns} FROM {s}.attempts \
                 WHERE ($1::text IS NULL OR namespace = $1) AND $2::bytea IS NULL \
                 AND {attempts_rest}"
            ),
            attempts_by_key: format!(
                "SELECT id, {attempt_columns} FROM {s}.attempts \
                 WHERE namespace = $1 AND key = $2 AND {attempts_rest}"
            ),
        }
    }
}

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
         {retain_until}, NULL, NULL, NULL, {}, {}, {}, {}, {}, {}, {}",
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
/// parameter or NULL.
pub(super) fn logged_entry(table: &str, event: &str, at: &str, operation_digest: &str) -> String {
    let t = table;
    format!(
        "{t}namespace, {t}key, {t}fence, {event}, {t}holder_run_id, {t}holder_trigger, \
         {t}holder_attempt, {t}holder_host, {t}holder_pid, {at}, {t}policy_digest, \
         {operation_digest}, NULL::text, NULL::text"
    )
}

/// The attempt-log CTE of a finish whose updated rows are `w` (nothing
/// without `log`), to sit between the update and the final `SELECT`.
pub(super) fn log_finished(s: &str, log: bool) -> String {
    if !log {
        return String::new();
    }
    format!(
        ", lg AS (INSERT INTO {s}.attempts ({}) SELECT {} FROM w)",
        codec::attempt_column_list(),
        logged_entry("w.", "w.state", "w.updated", "NULL::bytea"),
    )
}

/// What a fast write returns: in debug builds the whole row (prefixed by
/// `table`), for the operations layer to check against the machine; else
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Every statement of a schema, by name. Destructured, so that a
    /// statement added to `Sql` must be added here too.
    fn statements(sql: &Sql) -> Vec<(&'static str, &str)> {
        let Sql {
            lock,
            now,
            now_and_fence,
            insert,
            update,
            fast_claim,
            fast_claim_owned,
            batch_claim,
            get,
            list,
            gc,
            epoch_for_share,
            join,
            membership,
            job_acquire,
            job_get,
            job_heartbeat,
            job_release,
            finish_fast,
            finish_batch,
            insert_logged,
            update_logged,
            append_refused,
            append_many,
            attempts,
            attempts_by_key,
            registry,
        } = sql;
        vec![
            ("lock", lock),
            ("now", now),
            ("now_and_fence", now_and_fence),
            ("insert", insert),
            ("update", update),
            ("fast_claim", fast_claim),
            ("fast_claim_owned", fast_claim_owned),
            ("batch_claim", batch_claim),
            ("get", get),
            ("list", list),
            ("gc", gc),
            ("epoch_for_share", epoch_for_share),
            ("join", join),
            ("membership", membership),
            ("job_acquire", job_acquire),
            ("job_get", job_get),
            ("job_heartbeat", job_heartbeat),
            ("job_release", job_release),
            ("finish_fast", finish_fast),
            ("finish_batch", finish_batch),
            ("insert_logged", insert_logged),
            ("update_logged", update_logged),
            ("append_refused", append_refused),
            ("append_many", append_many),
            ("attempts", attempts),
            ("attempts_by_key", attempts_by_key),
        ]
        .into_iter()
        .map(|(name, text)| (name, text.as_str()))
        .chain(registry.statements())
        .collect()
    }

    /// The statements are fixed text but for the (checked, quoted) schema:
    /// built for two schemas they differ only in its name, so no value can
    /// reach them except as a bound parameter.
    #[test]
    fn the_schema_is_the_only_interpolation() {
        let (a, b) = (Sql::new("svc_a", true), Sql::new("svc_b", true));
        for ((name, a), (_, b)) in statements(&a).into_iter().zip(statements(&b)) {
            assert_eq!(a.replace("\"svc_a\"", "\"svc_b\""), b, "{name}");
            assert!(!a.replace("\"svc_a\"", "").contains("svc_a"), "{name}: {a}");
        }
        for text in [&a.lock, &a.insert, &a.fast_claim, &a.get, &a.list, &a.gc] {
            assert!(text.contains("\"svc_a\".records"), "{text}");
        }
        assert!(a.now_and_fence.contains("nextval('\"svc_a\".fence_seq')"));
        assert_eq!(a.update.matches('$').count(), AFTER_COLUMNS);
    }
}
