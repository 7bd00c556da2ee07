//! A held claim: the right to perform the effect while its fence is current.

use std::time::Duration;

use idem_core::KeyedDerivation;
use idem_store::{Claim, Ending, Finish, Outcome, RecordKey, Store};

use super::EngineError;

/// What an effect is handed (by [`super::Engine::run_once`] or a
/// [`crate::job::JobRunner`]): the key and fence to pass downstream.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ExecContext {
    /// The idempotency key (64 hex).
    pub key: String,
    /// The fencing token.
    pub fence: u64,
    /// Which attempt under this key (1 for the first).
    pub attempt: u32,
    /// Whether an earlier attempt may have performed the effect.
    pub take_over: bool,
    /// Who owns the effect, as the policy derived it (e.g. the customer).
    pub partition: String,
}

impl ExecContext {
    /// The context of a first attempt under `key` (64 hex) holding
    /// `fence`, with no partition: for calling an effect yourself (a test
    /// of it). The fields are public, to be set after; the struct is
    /// non-exhaustive, since what an effect is told may grow.
    pub fn new(key: impl Into<String>, fence: u64) -> Self {
        ExecContext {
            key: key.into(),
            fence,
            attempt: 1,
            take_over: false,
            partition: String::new(),
        }
    }
}

/// The right to perform an effect. Every write is conditional on the fence:
/// a deposed holder gets [`EngineError::Fenced`] and changes nothing.
///
/// Dropping an execution without completing or failing it leaves the record
/// in progress until its lease expires; the next duplicate then asks the
/// policy (the effect may have happened, so it is never re-run blindly).
pub struct Execution {
    store: Store,
    claim: Claim,
    lease: Duration,
    derivation: KeyedDerivation,
    taken_over: bool,
}

impl std::fmt::Debug for Execution {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Execution")
            .field("store", &self.store.describe())
            .field("claim", &self.claim)
            .field("taken_over", &self.taken_over)
            .finish()
    }
}

impl Execution {
    pub(crate) fn new(
        store: Store,
        claim: Claim,
        lease: Duration,
        derivation: KeyedDerivation,
        taken_over: bool,
    ) -> Self {
        Execution {
            store,
            claim,
            lease,
            derivation,
            taken_over,
        }
    }

    /// Namespace and key.
    pub fn key(&self) -> &RecordKey {
        &self.claim.key
    }

    /// The key as 64 hex characters: hand it downstream as the idempotency
    /// key.
    pub fn key_hex(&self) -> String {
        self.claim.key.digest.to_hex()
    }

    /// The fencing token: hand it downstream so a deposed holder's writes
    /// can be refused there too.
    pub fn fence(&self) -> u64 {
        self.claim.fence
    }

    /// Which attempt this is under the key (1 for the first).
    pub fn attempt(&self) -> u32 {
        self.claim.attempt
    }

    /// When the lease ends, by the store's clock (ms since the epoch).
    pub fn lease_until_ms(&self) -> u64 {
        self.claim.lease_until_ms
    }

    /// The lease this claim is renewed for.
    pub fn lease(&self) -> Duration {
        self.lease
    }

    /// The derivation behind the key (material, partition, retention).
    pub fn derivation(&self) -> &KeyedDerivation {
        &self.derivation
    }

    /// Whether this claim took over an earlier attempt (after a retryable
    /// failure, an unknown outcome or an expired lease): the effect may have
    /// happened before, so downstream must deduplicate by the key.
    pub fn is_take_over(&self) -> bool {
        self.taken_over
    }

    /// What an effect performed under this claim is handed.
    pub fn context(&self) -> ExecContext {
        ExecContext {
            key: self.key_hex(),
            fence: self.fence(),
            attempt: self.attempt(),
            take_over: self.is_take_over(),
            partition: self.derivation.partition.clone(),
        }
    }

    /// Extends the lease to the store's now + the lease.
    pub async fn heartbeat(&mut self) -> Result<u64, EngineError> {
        let until = self
            .store
            .records()
            .heartbeat(&self.claim.key, self.claim.fence, self.lease)
            .await?;
        self.claim.lease_until_ms = until;
        Ok(until)
    }

    /// Records the outcome; the record becomes final (replayed to every
    /// duplicate until its retention ends).
    pub async fn complete(self, outcome: Outcome) -> Result<(), EngineError> {
        self.end(Ending::Completed, outcome).await
    }

    /// Records a failure: retryable (the policy may re-execute) or permanent
    /// (final, replayed).
    pub async fn fail(self, retryable: bool, outcome: Outcome) -> Result<(), EngineError> {
        self.end(Ending::Failed { retryable }, outcome).await
    }

    /// [`Execution::complete`] or [`Execution::fail`], as `ending` says.
    pub async fn finish(self, ending: Ending, outcome: Outcome) -> Result<(), EngineError> {
        match ending {
            Ending::Completed => self.complete(outcome).await,
            Ending::Failed { retryable } => self.fail(retryable, outcome).await,
        }
    }

    /// Writes the end under the fence, in a span, counted.
    async fn end(self, ending: Ending, outcome: Outcome) -> Result<(), EngineError> {
        end_fenced(
            &self.store,
            &self.claim.key,
            self.claim.fence,
            ending,
            outcome,
        )
        .await
    }

    /// What the store writes when this execution ends so (for
    /// [`super::Engine::finish_batch`]).
    pub(crate) fn into_finish(self, ending: Ending, outcome: Outcome) -> Finish {
        Finish {
            key: self.claim.key,
            fence: self.claim.fence,
            ending,
            outcome,
        }
    }

    /// The store this claim is held in.
    pub(crate) fn store(&self) -> &Store {
        &self.store
    }

    /// A handle that can heartbeat this claim from another task.
    pub(crate) fn heartbeat_handle(&self) -> (Store, RecordKey, u64, Duration) {
        (
            self.store.clone(),
            self.claim.key.clone(),
            self.claim.fence,
            self.lease,
        )
    }
}

/// Writes the end of the attempt holding `fence` on `key`, in a span,
/// counted: what [`Execution`] does when it ends, for a holder known only
/// by its key and fence too ([`super::Engine::finish_fenced`]). The store
/// refuses a deposed fence and logs the change (or the refused write) in
/// the same transaction.
pub(crate) async fn end_fenced(
    store: &Store,
    key: &RecordKey,
    fence: u64,
    ending: Ending,
    outcome: Outcome,
) -> Result<(), EngineError> {
    use tracing::Instrument;
    let span = tracing::debug_span!(
        "idem.finish",
        idem.namespace = %key.namespace,
        idem.key = %key.digest,
        idem.fence = fence,
        idem.ending = super::telemetry::ending(ending),
        idem.result = tracing::field::Empty,
        db.system.name = super::telemetry::db_system(store),
        db.operation.name = match ending {
            Ending::Completed => "complete",
            Ending::Failed { .. } => "fail",
        },
        otel.status_code = tracing::field::Empty,
    );
    async {
        // Kept to recognise this holder's own earlier write of the same end
        // when a retry is refused (see `in_doubt`); a body is small.
        let sent = outcome.clone();
        let result = match ending {
            Ending::Completed => store.writes().complete(key, fence, outcome).await,
            Ending::Failed { retryable } => {
                store.writes().fail(key, fence, retryable, outcome).await
            }
        };
        let result = match result {
            Err(e)
                if super::in_doubt::already_recorded(store, key, fence, ending, &sent, &e)
                    .await =>
            {
                Ok(())
            }
            other => other.map_err(EngineError::from),
        };
        super::telemetry::finished(key, fence, ending, &result);
        result
    }
    .instrument(span)
    .await
}
