//! The batch statements: many claims, many finishes, one statement each
//! (`batch_claim.rs` and `batch_finish.rs` run them).

use crate::codec;
use crate::postgres::sql::{
    Fresh, NOW, finished_values, fresh_record, held_by, log_finished, logged_columns, logged_entry,
    written_columns,
};

/// The statement, for the schema `s` (quoted) and the fence sequence
/// `fence_seq` (a quoted regclass literal). Parameters: `$1`–`$12` arrays
/// (one element per request), `$13`/`$14` the clock, `$15`/`$16` the
/// ownership group and epoch (NULL: none), `$17` the operation digests
/// (for the `executed` entries logged in the same statement), `$18` the
/// kept operations' column text, `$19` the holders' tokens, `$20` whether
/// each effect commits with its end. Columns, one row per request in
/// order: `position` (1-based), `now_ms`, `current_epoch`,
/// `inserted_fence` (when this statement inserted the row), the record the
/// snapshot held, and in debug builds the inserted row (`ins_*`).
pub(in crate::postgres) fn claim_sql(s: &str, fence_seq: &str, log: bool) -> String {
    let now = NOW.replace("$1", "$13").replace("$2", "$14");
    let columns = codec::column_list("");
    let r_columns = codec::column_list("r.");
    let fresh = fresh_record(&Fresh {
        namespace: "u.namespace",
        key: "u.key",
        policy_digest: "u.policy_digest",
        fingerprint: "u.fingerprint",
        partition: "u.partition",
        lease: "u.lease",
        retention: "u.retention",
        run_id: "u.run_id",
        trigger: "u.trig",
        attempt: "u.attempt",
        host: "u.host",
        pid: "u.pid",
        operation: "u.operation",
        token: "u.token",
        effect_atomic: "u.effect_atomic",
        fence: &format!("nextval({fence_seq})"),
        now: "ok.ms",
    });
    // The inserted rows, renamed apart from the snapshot's (debug builds).
    let inserted = if cfg!(debug_assertions) {
        codec::COLUMNS
            .iter()
            .map(|c| format!(", ins.{c} AS ins_{c}"))
            .collect::<String>()
    } else {
        String::new()
    };
    format!(
        "WITH c AS MATERIALIZED (SELECT {now} AS ms), \
         m AS MATERIALIZED (SELECT epoch FROM {s}.memberships WHERE grp = $15::text FOR SHARE), \
         ok AS (SELECT c.ms FROM c \
           WHERE $15::text IS NULL OR EXISTS (SELECT 1 FROM m WHERE m.epoch = $16::int8)), \
         u AS (SELECT * FROM unnest($1::text[], $2::bytea[], $3::text[], $4::bytea[], $5::text[], \
           $6::int8[], $7::int8[], $8::text[], $9::text[], $10::int8[], $11::text[], $12::int8[], \
           $17::bytea[], $18::text[], $19::bytea[], $20::bool[]) \
           WITH ORDINALITY AS u(namespace, key, policy_digest, fingerprint, partition, lease, \
           retention, run_id, trig, attempt, host, pid, op_digest, operation, token, \
           effect_atomic, i)), \
         ins AS (INSERT INTO {s}.records ({columns}) \
           SELECT {fresh} \
           FROM (SELECT * FROM u ORDER BY u.namespace COLLATE \"C\", u.key) u CROSS JOIN ok \
           ON CONFLICT (namespace, key) DO NOTHING \
           RETURNING {}) \
         {} \
         SELECT u.i AS position, c.ms AS now_ms, (SELECT epoch FROM m) AS current_epoch, \
           ins.fence AS inserted_fence{inserted}, {r_columns} \
         FROM u CROSS JOIN c \
         LEFT JOIN ins ON ins.namespace = u.namespace AND ins.key = u.key \
         LEFT JOIN {s}.records r ON r.namespace = u.namespace AND r.key = u.key \
         ORDER BY u.i",
        logged_columns(""),
        if log {
            format!(
                ", lg AS (INSERT INTO {s}.attempts ({}) SELECT {} \
                 FROM ins JOIN u ON u.namespace = ins.namespace AND u.key = ins.key)",
                codec::attempt_column_list(),
                logged_entry("ins.", "'executed'", "ins.created", "u.op_digest"),
            )
        } else {
            String::new()
        },
    )
}

/// The batch statement: `$1`/`$2` the clock, `$3..$9` the batch's columns.
pub(in crate::postgres) fn finish_sql(s: &str, log: bool) -> String {
    format!(
        "WITH n AS (SELECT {NOW} AS ms), \
         b AS (SELECT * FROM unnest($3::text[], $4::bytea[], $5::int8[], $6::text[], $7::int4[], \
           $8::bytea[], $9::text[], $10::text[]) \
           AS b(namespace, key, fence, state, status, body, error, detail)), \
         w AS (UPDATE {s}.records AS r SET {} FROM n, b WHERE {} RETURNING {}, b.detail AS detail) \
         {} SELECT {} FROM w",
        finished_values("b.state", "b.status", "b.body", "b.error"),
        held_by("b.namespace", "b.key", "b.fence"),
        logged_columns("r."),
        log_finished(s, log),
        written_columns("", "namespace, key, fence, updated"),
    )
}
