//! Every SQL statement of the PostgreSQL store, built once per schema from
//! the shared pieces (`sql.rs`): the record statements here, the batch
//! statements in `batches.rs`, the registry's in `registrations.rs`. The schema's quoted name is the one identifier
//! interpolated into them (see the test at the end); every value is a
//! bound parameter.

mod batches;
mod registrations;

use super::sql::{
    AFTER_COLUMNS, COLUMN_TYPES, EXPIRED, Fresh, MAX_TIME, NOW, attempt_placeholders,
    finished_values, fresh_record, held_by, log_finished, logged_columns, logged_entry, quote,
    written_columns,
};
use crate::codec::{self, COLUMNS};
use batches::{claim_sql, finish_sql};
pub(in crate::postgres) use registrations::RegistrySql;

/// The SQL of one schema, built once.
#[derive(Debug)]
pub(in crate::postgres) struct Sql {
    pub(in crate::postgres) lock: String,
    pub(in crate::postgres) now: String,
    pub(in crate::postgres) now_and_fence: String,
    pub(in crate::postgres) insert: String,
    pub(in crate::postgres) update: String,
    pub(in crate::postgres) fast_claim: String,
    pub(in crate::postgres) fast_claim_owned: String,
    pub(in crate::postgres) batch_claim: String,
    pub(in crate::postgres) get: String,
    /// Many keys at one clock, in the order asked ($3 namespaces, $4 keys).
    pub(in crate::postgres) get_many: String,
    pub(in crate::postgres) list: String,
    /// A lookup by field: the records the lookup index (migration 10, a
    /// GIN index over the kept operation's fields) finds containing `$7`
    /// or `$8` (`jsonb` documents sent as text; `$8` may be NULL), then the rest of
    /// the filter. Its own statement, with no `$7 IS NULL OR`, so that a
    /// generic plan still uses the index.
    pub(in crate::postgres) list_by_field: String,
    pub(in crate::postgres) gc: String,
    pub(in crate::postgres) epoch_for_share: String,
    pub(in crate::postgres) join: String,
    pub(in crate::postgres) membership: String,
    pub(in crate::postgres) job_acquire: String,
    pub(in crate::postgres) job_get: String,
    pub(in crate::postgres) job_heartbeat: String,
    pub(in crate::postgres) job_release: String,
    pub(in crate::postgres) finish_fast: String,
    pub(in crate::postgres) finish_batch: String,
    pub(in crate::postgres) insert_logged: String,
    pub(in crate::postgres) update_logged: String,
    pub(in crate::postgres) append_refused: String,
    pub(in crate::postgres) append_many: String,
    pub(in crate::postgres) attempts: String,
    /// One record's timeline: an equality on the key index (written as
    /// `$2 IS NULL OR key = $3`, a generic plan could not use it).
    pub(in crate::postgres) attempts_by_key: String,
    pub(in crate::postgres) registry: RegistrySql,
}

impl Sql {
    /// Every statement of the store whose (checked) schema is `schema`;
    /// without `log`, the one-statement writes leave the attempt log out.
    pub(in crate::postgres) fn new(schema: &str, log: bool) -> Sql {
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
                effect_atomic: "$ATOMIC::bool",
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
            .replace("$TOKEN", "$17")
            .replace("$ATOMIC", "$18"),
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
            .replace("$TOKEN", "$19")
            .replace("$ATOMIC", "$20"),
            batch_claim: claim_sql(&s, &fence_seq, log),
            get: format!(
                "SELECT n.ms, {r_columns} FROM (SELECT {now34} AS ms) n \
                 LEFT JOIN {s}.records r ON r.namespace = $1 AND r.key = $2"
            ),
            get_many: format!(
                "SELECT n.ms, k.i, {r_columns} FROM (SELECT {NOW} AS ms) n \
                 CROSS JOIN unnest($3::text[], $4::bytea[]) WITH ORDINALITY AS k(namespace, key, i) \
                 LEFT JOIN {s}.records r ON r.namespace = k.namespace AND r.key = k.key ORDER BY k.i"
            ),
            // The clock is read once (MATERIALIZED), the row for it is kept
            // even when nothing matches (LEFT JOIN), so `now` is always known.
            list: format!(
                "WITH n AS MATERIALIZED (SELECT {NOW} AS ms) \
                 SELECT n.ms, {r_columns} FROM n LEFT JOIN LATERAL ( \
                   SELECT r.* FROM {s}.records r WHERE NOT {EXPIRED} \
                   AND ($3::text IS NULL OR r.namespace = $3) AND ($4::text IS NULL OR r.partition = $4) \
                   AND ($5::text IS NULL OR r.state = $5) {} \
                   ORDER BY r.updated DESC, r.namespace COLLATE \"C\", r.key LIMIT $6::int8 \
                 ) r ON true ORDER BY r.updated DESC, r.namespace COLLATE \"C\", r.key",
                places(7)
            ),
            list_by_field: format!(
                "WITH n AS MATERIALIZED (SELECT {NOW} AS ms) \
                 SELECT n.ms, {r_columns} FROM n LEFT JOIN LATERAL ( \
                   SELECT r.* FROM {s}.records r WHERE NOT {EXPIRED} \
                   AND r.operation LIKE '{{%' \
                   AND ({s}.idem_kept_fields(r.operation) @> $7::text::jsonb \
                        OR {s}.idem_kept_fields(r.operation) @> $8::text::jsonb) \
                   AND ($3::text IS NULL OR r.namespace = $3) AND ($4::text IS NULL OR r.partition = $4) \
                   AND ($5::text IS NULL OR r.state = $5) {} \
                   ORDER BY r.updated DESC, r.namespace COLLATE \"C\", r.key LIMIT $6::int8 \
                 ) r ON true ORDER BY r.updated DESC, r.namespace COLLATE \"C\", r.key",
                places(9)
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
            // Takes the lease the machine decided to take
            // (`machine::acquire_job`), conditional on the row still being
            // the one it decided on: absent ($6 NULL: an insert that meets
            // a row changes nothing), or the lease under fence $6.
            job_acquire: format!(
                "INSERT INTO {s}.job_leases AS j (job, holder, fence, lease_until, acquired) \
                 SELECT $1::text, $2::text, nextval({fence_seq}), \
                   LEAST(n.ms::numeric + $5::int8, {MAX_TIME})::int8, n.ms \
                 FROM (SELECT {now34} AS ms) n \
                 ON CONFLICT (job) DO UPDATE SET holder = EXCLUDED.holder, fence = EXCLUDED.fence, \
                   lease_until = EXCLUDED.lease_until, acquired = EXCLUDED.acquired \
                 WHERE j.fence = $6::int8 \
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
            finish_batch: finish_sql(&s, log),
            finish_fast: format!(
                "WITH n AS (SELECT {NOW} AS ms), \
                 w AS (UPDATE {s}.records AS r SET {} FROM n WHERE {} \
                   RETURNING {}, $10::text AS detail) \
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
            // `Records::log_answers`).
            append_many: format!(
                "INSERT INTO {s}.attempts ({attempt_columns}) \
                 SELECT u.* FROM unnest($1::text[], $2::bytea[], $3::int8[], $4::text[], \
                   $5::text[], $6::text[], $7::int8[], $8::text[], $9::int8[], $10::int8[], \
                   $11::text[], $12::bytea[], $13::text[], $14::text[]) AS u ({attempt_columns}) \
                 WHERE EXISTS (SELECT 1 FROM {s}.records r \
                   WHERE r.namespace = u.namespace AND r.key = u.key)"
            ),
            registry: RegistrySql::new(&s),
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

/// The conditions of `ListFilter::after` and `before` on a list, from
/// parameter `$first`: the place a page starts after (`updated`,
/// `namespace`, `key`), then the one it ends before; each NULL when not
/// asked for. The order is the list's: `updated` descending, then the
/// namespace's bytes and the key's.
fn places(first: usize) -> String {
    let (u, n, k) = (first, first + 1, first + 2);
    let (bu, bn, bk) = (first + 3, first + 4, first + 5);
    format!(
        "AND (${u}::int8 IS NULL OR r.updated < ${u} OR (r.updated = ${u} AND \
           (r.namespace COLLATE \"C\" > ${n}::text OR (r.namespace = ${n}::text AND r.key > ${k}::bytea)))) \
         AND (${bu}::int8 IS NULL OR r.updated > ${bu} OR (r.updated = ${bu} AND \
           (r.namespace COLLATE \"C\" < ${bn}::text OR (r.namespace = ${bn}::text AND r.key < ${bk}::bytea))))"
    )
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
            get_many,
            list,
            list_by_field,
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
            ("get_many", get_many),
            ("list", list),
            ("list_by_field", list_by_field),
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
        for text in [
            &a.lock,
            &a.insert,
            &a.fast_claim,
            &a.get,
            &a.get_many,
            &a.list,
            &a.gc,
        ] {
            assert!(text.contains("\"svc_a\".records"), "{text}");
        }
        assert!(a.now_and_fence.contains("nextval('\"svc_a\".fence_seq')"));
        assert_eq!(a.update.matches('$').count(), AFTER_COLUMNS);
    }
}
