//! What a claim asks, and what it gets.

use std::time::Duration;

use idem_core::{DuplicateContext, Operation};

use super::{Digest, Holder, KeptOperation, Outcome, OwnershipToken, RecordKey, RecordView};

/// What the engine asks a store to claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimRequest {
    /// Namespace and key.
    pub key: RecordKey,
    /// `sha256:<64 lowercase hex>`: the policy that derived the key.
    pub policy_digest: String,
    /// The operation's fingerprint.
    pub fingerprint: Digest,
    /// Who owns the effect.
    pub partition: String,
    /// How long the claim holds before its lease expires (store clock).
    pub lease: Duration,
    /// How long the record is kept after its last write (store clock).
    pub retention: Duration,
    /// Who is claiming.
    pub holder: Holder,
    /// The host's digest of the canonical business operation, for the
    /// attempt log (see [`crate::AttemptEntry::operation_digest`]); `None`
    /// when the caller has none.
    pub operation_digest: Option<Digest>,
    /// The canonical operation to keep with the record (see
    /// [`KeptOperation`]); the store keeps it only within
    /// [`MAX_KEPT_OPERATION_BYTES`] and while
    /// [`StoreOptions::keep_operations`] is on, and says why not otherwise.
    /// A text that is not a JSON object is refused
    /// ([`StoreError::InvalidRequest`]).
    pub operation: Option<KeptOperation>,
    /// The claimer's ownership epoch, when it works under partitioned
    /// ownership: the store refuses the claim
    /// ([`StoreError::StaleEpoch`]) unless it is the group's current epoch.
    /// `None` (the default) checks nothing.
    pub ownership: Option<OwnershipToken>,
}

/// A claim: the right to execute the effect, as long as `fence` is current.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    /// Namespace and key.
    pub key: RecordKey,
    /// The fencing token; hand it back on every write.
    pub fence: u64,
    /// When the lease ends, store clock.
    pub lease_until_ms: u64,
    /// Which attempt this is under the key (1 for the first).
    pub attempt: u32,
}

/// The record a claim collided with: what the engine needs to ask the
/// policy what the duplicate gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Existing {
    /// The record and its store-clock times.
    pub view: RecordView,
    /// Whether the claim's fingerprint equals the stored one.
    pub fingerprint_matches: bool,
}

impl Existing {
    /// The duplicate context a policy's `on-duplicate` receives.
    pub fn duplicate_context(&self, operation: Operation) -> DuplicateContext {
        let record = &self.view.record;
        DuplicateContext {
            operation,
            state: record.state,
            fingerprint_matches: self.fingerprint_matches,
            attempts: record.attempts,
            age_ms: self.view.age_ms,
            lease_remaining_ms: self.view.lease_remaining_ms,
            outcome: record.outcome.as_ref().map(Outcome::summary),
        }
    }
}

/// What a claim got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimOutcome {
    /// No live record existed: the caller holds the key and executes.
    Claimed(Claim),
    /// A live record exists: ask the policy what the duplicate gets.
    Existing(Box<Existing>),
}
