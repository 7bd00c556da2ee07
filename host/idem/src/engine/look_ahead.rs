//! Settling what is already done before claiming anything: a job about to
//! claim a batch first reads its records (read-only, one store call); an
//! operation whose record is final (completed, or failed for good) is
//! answered from it at once — the policy decides what the duplicate gets,
//! exactly as when a claim finds that record — and needs no claim, no slot
//! and no lease. The rest are claimed as usual. The read is an
//! optimisation, never a decision: a record that changes after it is met
//! by the claim, which decides as always.

use idem_store::{ClaimOutcome, Existing, RecordState};

use super::batch::ToClaim;
use super::{Begin, Engine, EngineError};

impl Engine {
    /// For each of `items`, in order: the answer it gets from a final
    /// record found for it now (`Some`), or `None` when it must be claimed
    /// (no record, an open one, or a dual-read window in force, where the
    /// replaced version's key decides first). One store read for all.
    pub(crate) async fn settle_ahead(
        &self,
        items: &[ToClaim],
    ) -> Result<Vec<Option<Result<Begin, EngineError>>>, EngineError> {
        if items.is_empty() || self.dual_read().is_some() {
            return Ok(items.iter().map(|_| None).collect());
        }
        self.admission.check(&self.store, &self.policy).await?;
        // Under partitioned ownership, only while this worker's epoch is
        // current: a deposed worker claims, and is told its epoch is stale
        // (its share is another's now), rather than replaying another's work.
        if let Some(token) = &self.options.ownership {
            let current = self.store.ownership().membership(&token.group).await?;
            if current.is_none_or(|m| m.epoch != token.epoch) {
                return Ok(items.iter().map(|_| None).collect());
            }
        }
        let keys: Vec<_> = items.iter().map(|i| i.request().key.clone()).collect();
        let found = self.store.records().get_many(&keys).await?;
        let mut out = Vec::with_capacity(items.len());
        for (item, view) in items.iter().zip(found) {
            let Some(view) = view else {
                out.push(None);
                continue;
            };
            if !matches!(
                view.record.state,
                RecordState::Completed | RecordState::FailedPermanent
            ) {
                out.push(None);
                continue;
            }
            let fingerprint_matches = view.record.fingerprint == item.request().fingerprint;
            let first = ClaimOutcome::Existing(Box::new(Existing {
                view,
                fingerprint_matches,
            }));
            let (op, keyed, request) = item.clone().into_parts();
            out.push(Some(
                self.settle_traced(&op, keyed, request, Some(Ok(first)))
                    .await,
            ));
        }
        Ok(out)
    }
}
