//! Many holders' ends of their attempts in one statement (the backend's
//! `batch_finish`).
//!
//! One statement updates every record still held under the fence its
//! holder claimed, with the single fast finish's conditions and values
//! (`sql::held_by`, `sql::finished_values`); a holder whose record it did
//! not update goes through the single path, which says exactly why
//! (fenced, gone, not in progress) or finishes it after all.

use std::collections::HashMap;

use tokio_postgres::types::ToSql;

use super::PostgresStore;
use crate::backend::Written;
use crate::vocabulary::Finish;
use crate::vocabulary::StoreError;

impl PostgresStore {
    /// Runs the batch statement for `finishes` (distinct keys, checked
    /// outcomes): what it wrote for each, in order.
    pub(super) async fn finish_statement(
        &self,
        finishes: &[&Finish],
    ) -> Result<Vec<Option<Written>>, StoreError> {
        let inner = &self.inner;
        let (manual, offset) = inner.clock();
        let namespaces: Vec<&str> = finishes.iter().map(|f| f.key.namespace.as_str()).collect();
        let keys: Vec<&[u8]> = finishes.iter().map(|f| f.key.digest.0.as_slice()).collect();
        let fences: Vec<i64> = finishes
            .iter()
            .map(|f| i64::try_from(f.fence).unwrap_or(i64::MAX))
            .collect();
        let states: Vec<&str> = finishes.iter().map(|f| f.ending.state().as_str()).collect();
        let statuses: Vec<i32> = finishes.iter().map(|f| f.outcome.status).collect();
        let bodies: Vec<&[u8]> = finishes.iter().map(|f| f.outcome.body.as_slice()).collect();
        let errors: Vec<Option<&str>> = finishes
            .iter()
            .map(|f| f.outcome.error.as_deref())
            .collect();
        let details: Vec<Option<String>> = finishes
            .iter()
            .map(|f| crate::vocabulary::end_note(f.ending.state(), &f.outcome))
            .collect();
        let params: [&(dyn ToSql + Sync); 10] = [
            &manual,
            &offset,
            &namespaces,
            &keys,
            &fences,
            &states,
            &statuses,
            &bodies,
            &errors,
            &details,
        ];
        let rows = inner
            .query("finishing a batch", &inner.sql.finish_batch, &params)
            .await?;
        let mut written = HashMap::with_capacity(rows.len());
        for row in &rows {
            let namespace: String = inner.column(row, "namespace")?;
            let key: Vec<u8> = inner.column(row, "key")?;
            let fence = inner.unsigned(inner.column(row, "fence")?, "fence")?;
            let now_ms = inner.unsigned(inner.column(row, "updated")?, "updated")?;
            let row = if cfg!(debug_assertions) {
                inner.decode_prefixed(row, "")?
            } else {
                None
            };
            written.insert((namespace, key, fence), Written { fence, now_ms, row });
        }
        Ok(finishes
            .iter()
            .map(|f| written.remove(&(f.key.namespace.clone(), f.key.digest.0.to_vec(), f.fence)))
            .collect())
    }
}
