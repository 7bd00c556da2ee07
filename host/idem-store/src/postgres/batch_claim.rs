//! Many claims in one statement (the backend's `batch_claim`).
//!
//! One autocommit statement inserts every fresh key (`INSERT … SELECT …
//! FROM unnest(…) ON CONFLICT DO NOTHING`, a fence from the sequence per
//! row, the clock read once, the ownership epoch checked as the single
//! fast claim checks it) and, in the same snapshot, reads the record
//! already under every other key. The operations layer then decides each
//! request with the machine, as a single claim would; what the statement
//! cannot settle (a record past its retention, or one another transaction
//! inserted after this statement's snapshot) takes the single path.
//!
//! Rows are inserted in key order: two batches racing over the same keys
//! wait for each other in one order, never in a cycle (a deadlock would
//! still be retried).

use tokio_postgres::types::ToSql;

use super::PostgresStore;
use super::sql::{Fresh, NOW, fresh_record, logged_columns, logged_entry};
use crate::backend::{BatchClaim, Written};
use crate::codec;
use crate::error::StoreError;
use crate::machine;
use crate::record::{ClaimRequest, KeptOperation};

/// The statement, for the schema `s` (quoted) and the fence sequence
/// `fence_seq` (a quoted regclass literal). Parameters: `$1`–`$12` arrays
/// (one element per request), `$13`/`$14` the clock, `$15`/`$16` the
/// ownership group and epoch (NULL: none), `$17` the operation digests
/// (for the `executed` entries logged in the same statement), `$18` the
/// kept operations' column text, `$19` the holders' tokens. Columns, one row per request in
/// order: `position` (1-based), `now_ms`, `current_epoch`,
/// `inserted_fence` (when this statement inserted the row), the record the
/// snapshot held, and in debug builds the inserted row (`ins_*`).
pub(super) fn claim_sql(s: &str, fence_seq: &str, log: bool) -> String {
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
           $17::bytea[], $18::text[], $19::bytea[]) \
           WITH ORDINALITY AS u(namespace, key, policy_digest, fingerprint, partition, lease, \
           retention, run_id, trig, attempt, host, pid, op_digest, operation, token, i)), \
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

impl PostgresStore {
    /// Runs the batch statement for `requests` (distinct keys, all valid,
    /// one ownership token); one answer per request, in order.
    pub(super) async fn claim_statement(
        &self,
        requests: &[&ClaimRequest],
    ) -> Result<Vec<BatchClaim>, StoreError> {
        let inner = &self.inner;
        let (manual, offset) = inner.clock();
        let clamp = |d| i64::try_from(machine::millis(d)).unwrap_or(i64::MAX);
        let all = || requests.iter();
        let namespaces: Vec<&str> = all().map(|r| r.key.namespace.as_str()).collect();
        let keys: Vec<&[u8]> = all().map(|r| r.key.digest.0.as_slice()).collect();
        let digests: Vec<&str> = all().map(|r| r.policy_digest.as_str()).collect();
        let fingerprints: Vec<&[u8]> = all().map(|r| r.fingerprint.0.as_slice()).collect();
        let partitions: Vec<&str> = all().map(|r| r.partition.as_str()).collect();
        let leases: Vec<i64> = all().map(|r| clamp(r.lease)).collect();
        let retentions: Vec<i64> = all().map(|r| clamp(r.retention)).collect();
        let run_ids: Vec<Option<&str>> = all().map(|r| r.holder.run_id.as_deref()).collect();
        let triggers: Vec<Option<&str>> = all().map(|r| r.holder.trigger.as_deref()).collect();
        let attempts: Vec<Option<i64>> = all().map(|r| r.holder.attempt.map(i64::from)).collect();
        let hosts: Vec<&str> = all().map(|r| r.holder.host.as_str()).collect();
        let pids: Vec<i64> = all().map(|r| i64::from(r.holder.pid)).collect();
        let operations: Vec<Option<&[u8]>> = all()
            .map(|r| r.operation_digest.as_ref().map(|d| d.0.as_slice()))
            .collect();
        let kept: Vec<Option<String>> = all()
            .map(|r| r.operation.as_ref().map(KeptOperation::to_column))
            .collect();
        let tokens: Vec<Option<&[u8]>> = all()
            .map(|r| r.holder.token.as_ref().map(|t| t.0.as_slice()))
            .collect();
        let ownership = requests[0].ownership.as_ref();
        let group = ownership.map(|t| t.group.as_str());
        let epoch = ownership.map(|t| i64::try_from(t.epoch).unwrap_or(i64::MAX));
        let params: [&(dyn ToSql + Sync); 19] = [
            &namespaces,
            &keys,
            &digests,
            &fingerprints,
            &partitions,
            &leases,
            &retentions,
            &run_ids,
            &triggers,
            &attempts,
            &hosts,
            &pids,
            &manual,
            &offset,
            &group,
            &epoch,
            &operations,
            &kept,
            &tokens,
        ];
        let rows = inner
            .query("claiming a batch", &inner.sql.batch_claim, &params)
            .await?;
        if rows.len() != requests.len() {
            return Err(inner.corrupt(format!(
                "a batch of {} claims returned {} rows",
                requests.len(),
                rows.len()
            )));
        }
        let mut answers = Vec::with_capacity(rows.len());
        for (n, (row, request)) in rows.iter().zip(requests).enumerate() {
            let position: i64 = inner.column(row, "position")?;
            if position != n as i64 + 1 {
                return Err(
                    inner.corrupt(format!("batch claim row {n} answers request {position}"))
                );
            }
            let now_ms = inner.unsigned(inner.column(row, "now_ms")?, "the clock")?;
            let epoch: Option<i64> = inner.column(row, "current_epoch")?;
            let current = epoch.map(|e| inner.unsigned(e, "epoch")).transpose()?;
            if let Err(stale) = machine::check_epoch(request.ownership.as_ref(), current) {
                answers.push(BatchClaim::Refused(stale));
                continue;
            }
            let fence: Option<i64> = inner.column(row, "inserted_fence")?;
            answers.push(match fence {
                Some(fence) => BatchClaim::Inserted(Written {
                    fence: inner.unsigned(fence, "fence")?,
                    now_ms,
                    row: if cfg!(debug_assertions) {
                        inner.decode_prefixed(row, "ins_")?
                    } else {
                        None
                    },
                }),
                None => match inner.decode_prefixed(row, "")? {
                    Some(record) => BatchClaim::Found(record, now_ms),
                    None => BatchClaim::Single,
                },
            });
        }
        Ok(answers)
    }
}
