//! The one-statement fast paths: a fresh claim and a holder's finish, each
//! one autocommit statement. Their bound values are gathered here
//! ([`ClaimValues`], [`FinishValues`]), and what they wrote read back.

use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

use super::Inner;
use crate::backend::Written;
use crate::machine;
use crate::vocabulary::StoreError;
use crate::vocabulary::{ClaimRequest, KeptOperation, Outcome, RecordKey, RecordState};

/// The bound values of the fresh-claim statement.
pub(super) struct ClaimValues<'r> {
    request: &'r ClaimRequest,
    manual: Option<i64>,
    offset: i64,
    lease: i64,
    retention: i64,
    key: Vec<u8>,
    fingerprint: Vec<u8>,
    attempt: Option<i64>,
    pid: i64,
    group: Option<String>,
    epoch: Option<i64>,
    operation: Option<Vec<u8>>,
    kept: Option<String>,
    token: Option<Vec<u8>>,
}

impl<'r> ClaimValues<'r> {
    pub(super) fn of(inner: &Inner, request: &'r ClaimRequest) -> Self {
        let (manual, offset) = inner.clock();
        let h = &request.holder;
        ClaimValues {
            request,
            manual,
            offset,
            lease: i64::try_from(machine::millis(request.lease)).unwrap_or(i64::MAX),
            retention: i64::try_from(machine::millis(request.retention)).unwrap_or(i64::MAX),
            key: request.key.digest.0.to_vec(),
            fingerprint: request.fingerprint.0.to_vec(),
            attempt: h.attempt.map(i64::from),
            pid: i64::from(h.pid),
            group: request.ownership.as_ref().map(|t| t.group.clone()),
            epoch: request
                .ownership
                .as_ref()
                .map(|t| i64::try_from(t.epoch).unwrap_or(i64::MAX)),
            operation: request.operation_digest.map(|d| d.0.to_vec()),
            kept: request.operation.as_ref().map(KeptOperation::to_column),
            token: h.token.map(|t| t.0.to_vec()),
        }
    }

    /// The statement (with or without the ownership check) and its values.
    pub(super) fn statement<'s>(
        &'s self,
        inner: &'s Inner,
    ) -> (&'s str, Vec<&'s (dyn ToSql + Sync)>) {
        let r = self.request;
        let mut params: Vec<&(dyn ToSql + Sync)> = vec![
            &r.key.namespace,
            &self.key,
            &r.policy_digest,
            &self.fingerprint,
            &r.partition,
            &self.lease,
            &self.retention,
            &r.holder.run_id,
            &r.holder.trigger,
            &self.attempt,
            &r.holder.host,
            &self.pid,
            &self.manual,
            &self.offset,
        ];
        // Without an ownership token the statement takes neither group nor
        // epoch: its operation digest is `$15`, the kept operation `$16`,
        // the holder's token `$17`, whether its effect is atomic `$18`.
        let sql = match &r.ownership {
            Some(_) => {
                params.extend([&self.group as &(dyn ToSql + Sync), &self.epoch]);
                &inner.sql.fast_claim_owned
            }
            None => &inner.sql.fast_claim,
        };
        params.extend([
            &self.operation as &(dyn ToSql + Sync),
            &self.kept,
            &self.token,
            &r.effect_atomic,
        ]);
        (sql, params)
    }
}

/// The bound values of the finish statement.
pub(super) struct FinishValues<'f> {
    key: &'f RecordKey,
    outcome: &'f Outcome,
    manual: Option<i64>,
    offset: i64,
    key_bytes: Vec<u8>,
    state: &'static str,
    fence: i64,
    /// The end's attempt-log detail (`vocabulary::attempt::end_note`).
    detail: Option<String>,
}

impl<'f> FinishValues<'f> {
    pub(super) fn of(
        inner: &Inner,
        key: &'f RecordKey,
        fence: u64,
        state: RecordState,
        outcome: &'f Outcome,
    ) -> Self {
        let (manual, offset) = inner.clock();
        FinishValues {
            key,
            outcome,
            manual,
            offset,
            key_bytes: key.digest.0.to_vec(),
            state: state.as_str(),
            fence: i64::try_from(fence).unwrap_or(i64::MAX),
            detail: crate::vocabulary::end_note(state, outcome),
        }
    }

    pub(super) fn params(&self) -> [&(dyn ToSql + Sync); 10] {
        [
            &self.manual,
            &self.offset,
            &self.key.namespace,
            &self.key_bytes,
            &self.state,
            &self.outcome.status,
            &self.outcome.body,
            &self.outcome.error,
            &self.fence,
            &self.detail,
        ]
    }
}

impl Inner {
    /// What a fresh claim's statement wrote (`None`: a row existed).
    pub(super) fn claim_written(&self, row: Option<Row>) -> Result<Option<Written>, StoreError> {
        let Some(row) = row else {
            return Ok(None);
        };
        Ok(Some(Written {
            fence: self.unsigned(self.column(&row, "fence")?, "fence")?,
            now_ms: self.unsigned(self.column(&row, "created")?, "created")?,
            row: self.written_row(&row)?,
        }))
    }

    /// What a finish's statement wrote (`None`: it matched no holder).
    pub(super) fn finish_written(&self, rows: &[Row]) -> Result<Option<Written>, StoreError> {
        let [row] = rows else {
            return Ok(None);
        };
        Ok(Some(Written {
            fence: self.unsigned(self.column(row, "fence")?, "fence")?,
            now_ms: self.unsigned(self.column(row, "updated")?, "updated")?,
            row: self.written_row(row)?,
        }))
    }

    /// The whole row as written, for the debug check (it costs the row's
    /// bytes on the wire, so release builds leave it).
    fn written_row(&self, row: &Row) -> Result<Option<crate::vocabulary::Record>, StoreError> {
        if cfg!(debug_assertions) {
            self.decode_prefixed(row, "")
        } else {
            Ok(None)
        }
    }
}
