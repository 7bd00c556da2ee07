//! Many holders' ends of their attempts in one round trip (`finish_many`).
//!
//! One statement updates every record still held under the fence its holder
//! claimed, with the conditions and values of the single fast finish
//! (`machine::held`, `machine::finish`); a holder whose record it did not
//! update goes through the single path, which says exactly why (fenced,
//! gone, not in progress) or finishes it after all. A key that appears
//! twice in a batch is finished alone, after the statement, so that one row
//! is never matched by two of the batch's entries.

use std::collections::HashSet;

use tokio_postgres::types::ToSql;

use super::{EXPIRED, Inner, NOW};
use crate::machine;
use crate::{Finish, StoreError};

/// The batch statement: `$1`/`$2` the clock, `$3..$9` the batch's columns.
pub(super) fn finish_sql(s: &str) -> String {
    format!(
        "WITH n AS (SELECT {NOW} AS ms), \
         b AS (SELECT * FROM unnest($3::text[], $4::bytea[], $5::int8[], $6::text[], $7::int4[], \
           $8::bytea[], $9::text[]) AS b(namespace, key, fence, state, status, body, error)) \
         UPDATE {s}.records AS r SET state = b.state, outcome_status = b.status, \
           outcome_body = b.body, outcome_error = b.error, updated = n.ms, \
           retain_until = CASE WHEN r.retention_ms > 9223372036854775807 - n.ms \
             THEN 9223372036854775807 ELSE n.ms + r.retention_ms END \
         FROM n, b WHERE r.namespace = b.namespace AND r.key = b.key AND r.fence = b.fence \
           AND r.state = 'in-progress' AND NOT {EXPIRED} \
         RETURNING r.namespace, r.key, r.fence"
    )
}

pub(super) async fn finish_many(
    inner: &Inner,
    finishes: Vec<Finish>,
) -> Result<Vec<Result<(), StoreError>>, StoreError> {
    let limit = inner.options.max_outcome_bytes;
    // Which entries go into the statement: checked outcomes, first
    // occurrence of each key.
    let mut seen = HashSet::new();
    let mut batched = Vec::new();
    let mut results: Vec<Option<Result<(), StoreError>>> = Vec::with_capacity(finishes.len());
    for (i, f) in finishes.iter().enumerate() {
        match machine::checked_outcome(&f.key, f.outcome.clone(), limit) {
            Err(refused) => results.push(Some(Err(refused))),
            Ok(outcome) => {
                results.push(None);
                if seen.insert((f.key.namespace.clone(), f.key.key)) {
                    batched.push((i, outcome));
                }
            }
        }
    }
    let mut written = HashSet::new();
    if !batched.is_empty() {
        let (manual, offset) = inner.clock();
        let namespaces: Vec<String> = batched
            .iter()
            .map(|(i, _)| finishes[*i].key.namespace.clone())
            .collect();
        let keys: Vec<Vec<u8>> = batched
            .iter()
            .map(|(i, _)| finishes[*i].key.key.0.to_vec())
            .collect();
        let fences: Vec<i64> = batched
            .iter()
            .map(|(i, _)| i64::try_from(finishes[*i].fence).unwrap_or(i64::MAX))
            .collect();
        let states: Vec<&str> = batched
            .iter()
            .map(|(i, _)| finishes[*i].ending.state().as_str())
            .collect();
        let statuses: Vec<i32> = batched.iter().map(|(_, o)| o.status).collect();
        let bodies: Vec<&[u8]> = batched.iter().map(|(_, o)| o.body.as_slice()).collect();
        let errors: Vec<Option<&str>> = batched.iter().map(|(_, o)| o.error.as_deref()).collect();
        let params: [&(dyn ToSql + Sync); 9] = [
            &manual,
            &offset,
            &namespaces,
            &keys,
            &fences,
            &states,
            &statuses,
            &bodies,
            &errors,
        ];
        for row in inner
            .query("finishing a batch", &inner.sql.finish_batch, &params)
            .await?
        {
            let namespace: String = row.get(0);
            let key: Vec<u8> = row.get(1);
            let fence: i64 = row.get(2);
            written.insert((namespace, key, fence));
        }
    }
    // Everything the statement did not write: the single path decides.
    let mut out = Vec::with_capacity(finishes.len());
    for (f, result) in finishes.into_iter().zip(results) {
        if let Some(result) = result {
            out.push(result);
            continue;
        }
        let fence = i64::try_from(f.fence).unwrap_or(i64::MAX);
        if written.remove(&(f.key.namespace.clone(), f.key.key.0.to_vec(), fence)) {
            out.push(Ok(()));
        } else {
            out.push(
                inner
                    .finish(&f.key, f.fence, f.ending.state(), f.outcome)
                    .await,
            );
        }
    }
    Ok(out)
}
