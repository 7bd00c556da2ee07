//! Many claims in one statement (the backend's `batch_claim`).
//!
//! One autocommit statement inserts every fresh key (`INSERT … SELECT …
//! FROM unnest(…) ON CONFLICT DO NOTHING`, a fence from the sequence per
//! row, the clock read once, the ownership epoch checked as the single
//! fast claim checks it) and, in the same snapshot, reads the record
//! already under every other key. The executor (`execute/claims.rs`) then
//! decides each request with the machine, as a single claim would; what the statement
//! cannot settle (a record past its retention, or one another transaction
//! inserted after this statement's snapshot) takes the single path.
//!
//! Rows are inserted in key order: two batches racing over the same keys
//! wait for each other in one order, never in a cycle (a deadlock would
//! still be retried).

use tokio_postgres::types::ToSql;

use super::PostgresStore;
use crate::backend::{BatchAnswer, Written};
use crate::machine;
use crate::vocabulary::StoreError;
use crate::vocabulary::{ClaimRequest, KeptOperation};

impl PostgresStore {
    /// Runs the batch statement for `requests` (distinct keys, all valid,
    /// one ownership token); one answer per request, in order.
    pub(super) async fn claim_statement(
        &self,
        requests: &[&ClaimRequest],
    ) -> Result<Vec<BatchAnswer>, StoreError> {
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
        let atomic: Vec<bool> = all().map(|r| r.effect_atomic).collect();
        let ownership = requests[0].ownership.as_ref();
        let group = ownership.map(|t| t.group.as_str());
        let epoch = ownership.map(|t| i64::try_from(t.epoch).unwrap_or(i64::MAX));
        let params: [&(dyn ToSql + Sync); 20] = [
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
            &atomic,
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
                answers.push(BatchAnswer::Refused(stale));
                continue;
            }
            let fence: Option<i64> = inner.column(row, "inserted_fence")?;
            answers.push(match fence {
                Some(fence) => BatchAnswer::Inserted(Written {
                    fence: inner.unsigned(fence, "fence")?,
                    now_ms,
                    row: if cfg!(debug_assertions) {
                        inner.decode_prefixed(row, "ins_")?
                    } else {
                        None
                    },
                }),
                None => match inner.decode_prefixed(row, "")? {
                    Some(record) => BatchAnswer::Found(record, now_ms),
                    None => BatchAnswer::Single,
                },
            });
        }
        Ok(answers)
    }
}
