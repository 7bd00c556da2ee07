//! What a claim asks, and what it gets.

use std::time::Duration;

use idem_core::{DuplicateContext, Operation, OutcomeSummary, RecordState};

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
    /// Whether the claimer's effect commits in the same store transaction
    /// as its end (an effect in the store's transaction: its business
    /// writes and the completion are durable together, or neither is).
    /// Kept with the record ([`Record::effect_atomic`]): should the claim
    /// expire, a duplicate knows nothing was done and re-executes instead
    /// of sending the record to review. Claim `false` unless the effect
    /// really ends that way: a record that says so wrongly would be run
    /// again after an effect that happened.
    ///
    /// [`Record::effect_atomic`]: crate::Record::effect_atomic
    pub effect_atomic: bool,
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

/// The error a duplicate's policy reads in the outcome of a record whose
/// claim expired with its effect atomic with its end (see
/// [`Existing::duplicate_context`]); the attempt log's take-over of such a
/// record carries it as its detail.
pub const EXPIRED_WITHOUT_EFFECT: &str = "the previous holder's claim expired before its end; \
     its effect commits with its end, so nothing was done";

impl Existing {
    /// The duplicate context a policy's `on-duplicate` receives: the
    /// record as it is, except for a claim whose lease expired (store
    /// clock) with its effect atomic with its end
    /// ([`Record::expired_without_effect`](crate::Record::expired_without_effect)).
    /// The host knows that attempt did nothing, so the policy is told what
    /// is true: `failed-retryable` (trying again is safe), attempts as they
    /// are, and an outcome whose error says why
    /// ([`EXPIRED_WITHOUT_EFFECT`], status 0, no bytes). A policy's
    /// standard answer to that is `re-execute`: the record never waits for
    /// review, and the late holder's commit is refused by its fence inside
    /// its own transaction.
    pub fn duplicate_context(&self, operation: Operation) -> DuplicateContext {
        let record = &self.view.record;
        let without_effect = record.expired_without_effect(self.view.now_ms);
        DuplicateContext {
            operation,
            state: if without_effect {
                RecordState::FailedRetryable
            } else {
                record.state
            },
            fingerprint_matches: self.fingerprint_matches,
            attempts: record.attempts,
            age_ms: self.view.age_ms,
            lease_remaining_ms: self.view.lease_remaining_ms,
            outcome: if without_effect {
                Some(OutcomeSummary {
                    status: 0,
                    size: 0,
                    error: Some(EXPIRED_WITHOUT_EFFECT.to_string()),
                })
            } else {
                record.outcome.as_ref().map(Outcome::summary)
            },
        }
    }
}

// Exhaustive on purpose (not `#[non_exhaustive]`): a claim either holds the key or finds a live
// record, and the engine must handle both.
/// What a claim got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimOutcome {
    /// No live record existed: the caller holds the key and executes.
    Claimed(Claim),
    /// A live record exists: ask the policy what the duplicate gets.
    Existing(Box<Existing>),
}
