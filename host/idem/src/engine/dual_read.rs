//! Dual-read during a migration window: for a while after an upgrade that
//! changes keys, a claim also looks up the key the replaced version derives
//! for the operation. A live record there (the effect already happened, or
//! is happening, under the old key) settles the claim exactly as a record
//! under its own key would — replayed, in progress, taken over under a
//! higher fence — so a duplicate across the upgrade is caught instead of
//! charged again.
//!
//! The window comes from the store (`idem policy activate --dual-read 30d`
//! records the replaced version; the engine loads its kept component) or
//! from the embedding service ([`super::Engine::with_dual_read`]). Limits:
//! the lookup and the claim are two store calls, so a process still running
//! the old version that claims the same operation between them is not
//! caught (stop the old version before the window matters); an operation
//! the old version refuses has no old key to look up.

use std::sync::Arc;

use idem_core::{KeyedDerivation, Operation};
use idem_store::{ClaimOutcome, ClaimRequest, Existing, RecordKey};

use super::{Engine, EngineError};
use crate::policy::LoadedPolicy;

/// A replaced version whose keys claims also look up, and until when.
#[derive(Debug, Clone)]
pub struct DualRead {
    /// The version replaced.
    pub previous: LoadedPolicy,
    /// The window's end, store clock (ms since the epoch).
    pub until_ms: u64,
}

/// What a dual read found: the claim settles on the record under the old
/// key.
pub(super) struct Found {
    pub(super) keyed: KeyedDerivation,
    pub(super) request: ClaimRequest,
    pub(super) first: ClaimOutcome,
}

impl Engine {
    /// This engine, also looking up the key `previous` derives for each
    /// operation until `until_ms` (store clock): see [`dual_read`](self).
    pub fn with_dual_read(mut self, previous: LoadedPolicy, until_ms: u64) -> Self {
        self.dual_read = Some(Arc::new(DualRead { previous, until_ms }));
        self
    }

    /// The window in force: the one given, else the store's (loaded at
    /// admission).
    pub(super) fn dual_read(&self) -> Option<Arc<DualRead>> {
        self.dual_read
            .clone()
            .or_else(|| self.admission.dual_read())
    }

    /// The live record under the key the replaced version derives for `op`,
    /// while a window is open and that key differs from `keyed`'s.
    pub(super) async fn dual_read_hit(
        &self,
        op: &Operation,
        keyed: &KeyedDerivation,
    ) -> Result<Option<Found>, EngineError> {
        let Some(dual) = self.dual_read() else {
            return Ok(None);
        };
        let now = self.policy_now_ms();
        if now >= dual.until_ms {
            return Ok(None);
        }
        let Ok(old) = dual.previous.derive(op, now)?.value else {
            return Ok(None);
        };
        if old.key == keyed.key && old.namespace == keyed.namespace {
            return Ok(None);
        }
        let key = RecordKey::new(old.namespace.clone(), old.key);
        let Some(view) = self.store.records().get(&key).await? else {
            return Ok(None);
        };
        tracing::debug!(key = %key, "dual read: the replaced version's record");
        let fingerprint_matches = view.record.fingerprint == old.fingerprint;
        let mut request = self.claim_request(op, &old);
        request.policy_digest = dual.previous.digest().to_string();
        Ok(Some(Found {
            keyed: old,
            request,
            first: ClaimOutcome::Existing(Box::new(Existing {
                view,
                fingerprint_matches,
            })),
        }))
    }
}
