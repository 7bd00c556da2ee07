//! Many claims in one statement: `Store::claim_many` on PostgreSQL.
//!
//! One autocommit statement inserts every fresh key (`INSERT … SELECT …
//! FROM unnest(…) ON CONFLICT DO NOTHING`, a fence from the sequence per
//! row, the clock read once, the ownership epoch checked as the single
//! fast claim checks it) and, in the same snapshot, reads the record
//! already under every other key. Rust then decides each request with
//! `machine::claim`, as a single claim would. What the statement cannot
//! settle goes through the single-claim path afterwards, in order: a key
//! whose record is past its retention (replaced under a row lock there), or
//! one another transaction inserted after this statement's snapshot.
//!
//! Rows are inserted in key order: two batches racing over the same keys
//! wait for each other in one order, never in a cycle (a deadlock would
//! still be retried).

use std::collections::HashMap;

use tokio_postgres::types::ToSql;

use super::{Inner, MAX_TIME, NOW, PostgresStore};
use crate::machine::{self, ClaimStep};
use crate::{ClaimOutcome, ClaimRequest, Record, RecordKey, Store, StoreError};

/// The statement, for the schema `s` (quoted) and the fence sequence
/// `fence_seq` (a quoted regclass literal). Parameters: `$1`–`$12` arrays
/// (one element per request), `$13`/`$14` the clock, `$15`/`$16` the
/// ownership group and epoch (NULL: none). Columns: the request's position
/// (1-based), the clock, the group's current epoch, the fence when this
/// statement inserted the row, then the record the snapshot held.
pub(super) fn claim_sql(s: &str, fence_seq: &str, columns: &str, r_columns: &str) -> String {
    let now = NOW.replace("$1", "$13").replace("$2", "$14");
    format!(
        "WITH c AS MATERIALIZED (SELECT {now} AS ms), \
         m AS MATERIALIZED (SELECT epoch FROM {s}.memberships WHERE grp = $15::text FOR SHARE), \
         ok AS (SELECT c.ms FROM c \
           WHERE $15::text IS NULL OR EXISTS (SELECT 1 FROM m WHERE m.epoch = $16::int8)), \
         u AS (SELECT * FROM unnest($1::text[], $2::bytea[], $3::text[], $4::bytea[], $5::text[], \
           $6::int8[], $7::int8[], $8::text[], $9::text[], $10::int8[], $11::text[], $12::int8[]) \
           WITH ORDINALITY AS u(namespace, key, policy_digest, fingerprint, partition, lease, \
           retention, run_id, trig, attempt, host, pid, i)), \
         ins AS (INSERT INTO {s}.records ({columns}) \
           SELECT u.namespace, u.key, u.policy_digest, u.fingerprint, u.partition, 'in-progress', \
             nextval({fence_seq}), LEAST(ok.ms::numeric + u.lease, {MAX_TIME})::int8, 1, ok.ms, \
             ok.ms, u.retention, GREATEST(LEAST(ok.ms::numeric + u.retention, {MAX_TIME}), \
             LEAST(ok.ms::numeric + u.lease, {MAX_TIME}))::int8, NULL, NULL, NULL, \
             u.run_id, u.trig, u.attempt, u.host, u.pid \
           FROM (SELECT * FROM u ORDER BY u.namespace COLLATE \"C\", u.key) u CROSS JOIN ok \
           ON CONFLICT (namespace, key) DO NOTHING \
           RETURNING namespace, key, fence) \
         SELECT u.i, c.ms, (SELECT epoch FROM m), ins.fence, {r_columns} \
         FROM u CROSS JOIN c \
         LEFT JOIN ins ON ins.namespace = u.namespace AND ins.key = u.key \
         LEFT JOIN {s}.records r ON r.namespace = u.namespace AND r.key = u.key \
         ORDER BY u.i"
    )
}

/// Where one request of a batch stands.
enum Slot {
    /// Answered.
    Done(Result<ClaimOutcome, StoreError>),
    /// The same key as the request at this position, which came first.
    SameAs(usize),
    /// For the single-claim path.
    Single,
}

/// One row of the statement: for the request it was sent for.
struct Answer {
    now: u64,
    current_epoch: Option<u64>,
    inserted_fence: Option<u64>,
    record: Option<Record>,
}

/// `Store::claim_many` on PostgreSQL.
pub(super) async fn claim_many(
    store: &PostgresStore,
    requests: Vec<ClaimRequest>,
) -> Result<Vec<Result<ClaimOutcome, StoreError>>, StoreError> {
    let token = requests.first().and_then(|r| r.ownership.clone());
    if requests.len() < 2 || requests.iter().any(|r| r.ownership != token) {
        // One claim, or tokens the statement's single epoch check cannot
        // serve: one at a time.
        let mut outcomes = Vec::with_capacity(requests.len());
        for request in requests {
            outcomes.push(store.claim(request).await);
        }
        return Ok(outcomes);
    }
    // Each valid key is sent once, at its first position.
    let mut slots = Vec::with_capacity(requests.len());
    let mut first_of: HashMap<&RecordKey, usize> = HashMap::new();
    let mut sent = Vec::new();
    for (i, request) in requests.iter().enumerate() {
        slots.push(match machine::validate(request) {
            Err(refused) => Slot::Done(Err(refused)),
            Ok(()) => match first_of.get(&request.key) {
                Some(&first) => Slot::SameAs(first),
                None => {
                    first_of.insert(&request.key, i);
                    sent.push(i);
                    Slot::Single
                }
            },
        });
    }
    let answers = if sent.is_empty() {
        Vec::new()
    } else {
        store.inner.batch_statement(&requests, &sent).await?
    };
    // The records this batch made or found, for the repeated keys.
    let mut seen: HashMap<usize, (Record, u64)> = HashMap::new();
    for (&i, answer) in sent.iter().zip(answers) {
        let request = &requests[i];
        if let Err(stale) = machine::check_epoch(request.ownership.as_ref(), answer.current_epoch) {
            slots[i] = Slot::Done(Err(stale));
            continue;
        }
        slots[i] = match answer.inserted_fence {
            Some(fence) => {
                let record = machine::new_record(request, fence, answer.now);
                let claim = machine::claim_of(&record);
                seen.insert(i, (record, answer.now));
                Slot::Done(Ok(ClaimOutcome::Claimed(claim)))
            }
            None => match machine::claim(answer.record.clone(), request, answer.now) {
                ClaimStep::Existing(existing) => {
                    seen.insert(i, (existing.view.record.clone(), answer.now));
                    Slot::Done(Ok(ClaimOutcome::Existing(existing)))
                }
                ClaimStep::Insert => Slot::Single,
            },
        };
    }
    // In order: a repeated key after its first occurrence.
    let mut outcomes = Vec::with_capacity(requests.len());
    for (slot, request) in slots.into_iter().zip(requests) {
        let outcome = match slot {
            Slot::Done(outcome) => outcome,
            Slot::SameAs(first) => match seen.get(&first) {
                Some((record, now)) => match machine::claim(Some(record.clone()), &request, *now) {
                    ClaimStep::Existing(existing) => Ok(ClaimOutcome::Existing(existing)),
                    // A record this batch just made or found live is
                    // live at the same instant: unreachable, but the
                    // single path is the safe answer.
                    ClaimStep::Insert => store.claim(request).await,
                },
                // The first occurrence was refused or went the single
                // path: so does this one, after it.
                None => store.claim(request).await,
            },
            // Repeats of this key are not in `seen`: they take the single
            // path after this one.
            Slot::Single => store.claim(request).await,
        };
        outcomes.push(outcome);
    }
    Ok(outcomes)
}

impl Inner {
    /// Runs the batch statement for `requests[i]`, `i` in `sent` (distinct
    /// keys, all valid, one ownership token); one answer per sent request,
    /// in order.
    async fn batch_statement(
        &self,
        requests: &[ClaimRequest],
        sent: &[usize],
    ) -> Result<Vec<Answer>, StoreError> {
        let (manual, offset) = self.clock();
        let clamp = |d| i64::try_from(machine::millis(d)).unwrap_or(i64::MAX);
        let pick = || sent.iter().map(|&i| &requests[i]);
        let namespaces: Vec<&str> = pick().map(|r| r.key.namespace.as_str()).collect();
        let keys: Vec<&[u8]> = pick().map(|r| r.key.key.0.as_slice()).collect();
        let digests: Vec<&str> = pick().map(|r| r.policy_digest.as_str()).collect();
        let fingerprints: Vec<&[u8]> = pick().map(|r| r.fingerprint.0.as_slice()).collect();
        let partitions: Vec<&str> = pick().map(|r| r.partition.as_str()).collect();
        let leases: Vec<i64> = pick().map(|r| clamp(r.lease)).collect();
        let retentions: Vec<i64> = pick().map(|r| clamp(r.retention)).collect();
        let run_ids: Vec<Option<&str>> = pick().map(|r| r.holder.run_id.as_deref()).collect();
        let triggers: Vec<Option<&str>> = pick().map(|r| r.holder.trigger.as_deref()).collect();
        let attempts: Vec<Option<i64>> = pick().map(|r| r.holder.attempt.map(i64::from)).collect();
        let hosts: Vec<&str> = pick().map(|r| r.holder.host.as_str()).collect();
        let pids: Vec<i64> = pick().map(|r| i64::from(r.holder.pid)).collect();
        let token = requests[sent[0]].ownership.as_ref();
        let group = token.map(|t| t.group.as_str());
        let epoch = token.map(|t| i64::try_from(t.epoch).unwrap_or(i64::MAX));
        let params: [&(dyn ToSql + Sync); 16] = [
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
        ];
        let rows = self
            .query("claiming a batch", &self.sql.batch_claim, &params)
            .await?;
        if rows.len() != sent.len() {
            return Err(self.corrupt(format!(
                "a batch of {} claims returned {} rows",
                sent.len(),
                rows.len()
            )));
        }
        let mut answers = Vec::with_capacity(rows.len());
        for (n, row) in rows.iter().enumerate() {
            let get_err = |e: tokio_postgres::Error| {
                self.corrupt(format!("a batch claim row does not decode: {e}"))
            };
            let position: i64 = row.try_get(0).map_err(get_err)?;
            if position != n as i64 + 1 {
                return Err(self.corrupt(format!("batch claim row {n} answers request {position}")));
            }
            let epoch: Option<i64> = row.try_get(2).map_err(get_err)?;
            let fence: Option<i64> = row.try_get(3).map_err(get_err)?;
            answers.push(Answer {
                now: self.unsigned(row.try_get(1).map_err(get_err)?, "the clock")?,
                current_epoch: epoch.map(|e| self.unsigned(e, "epoch")).transpose()?,
                inserted_fence: fence.map(|f| self.unsigned(f, "fence")).transpose()?,
                record: self.decode(row, 4)?,
            });
        }
        Ok(answers)
    }
}
