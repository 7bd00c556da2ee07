//! Many operations in one store call: claims ([`Engine::claim_batch`],
//! then [`Engine::begin_claimed`] for each) and ends
//! ([`Engine::finish_batch`]).

use idem_core::{KeyedDerivation, Operation};
use idem_store::{ClaimOutcome, ClaimRequest, Ending, Finish, Outcome, StoreError};

use super::{Begin, Engine, EngineError, Execution, in_doubt, telemetry};

/// One operation and its derivation, as a batch claim takes them.
pub(crate) type Derived = (Operation, KeyedDerivation);

/// One operation about to be claimed, with the claim request it is sent
/// with: the same request (its holder token) each time it is sent again,
/// so that a claim whose answer was lost is recognised as this one.
#[derive(Debug, Clone)]
pub(crate) struct ToClaim {
    op: Operation,
    keyed: KeyedDerivation,
    request: ClaimRequest,
}

impl ToClaim {
    /// The request it is claimed with.
    pub(crate) fn request(&self) -> &ClaimRequest {
        &self.request
    }

    /// The operation.
    pub(crate) fn operation(&self) -> &Operation {
        &self.op
    }

    /// The operation, its derivation and its request.
    pub(crate) fn into_parts(self) -> (Operation, KeyedDerivation, ClaimRequest) {
        (self.op, self.keyed, self.request)
    }
}

/// One operation's first claim, made in a batch by [`Engine::claim_batch`];
/// [`Engine::begin_claimed`] finishes it.
#[derive(Debug)]
pub struct FirstClaim {
    pub(super) op: Operation,
    pub(super) keyed: KeyedDerivation,
    pub(super) request: ClaimRequest,
    pub(super) first: Result<ClaimOutcome, StoreError>,
}

impl FirstClaim {
    /// The operation.
    pub fn operation(&self) -> &Operation {
        &self.op
    }

    /// Whether the batch claimed the key for this operation (else it found
    /// a record, or the store refused).
    pub fn is_fresh(&self) -> bool {
        matches!(self.first, Ok(ClaimOutcome::Claimed(_)))
    }

    /// Whether settling it may call the store again: a record still open
    /// (in progress, failed-retryable, outcome-unknown) may be waited for,
    /// taken over or marked; a fresh claim or a final record needs nothing
    /// more of the store (a replay's answer is queued for the log).
    pub(crate) fn may_call_the_store(&self) -> bool {
        matches!(
            &self.first,
            Ok(ClaimOutcome::Existing(e)) if !matches!(
                e.view.record.state,
                idem_store::RecordState::Completed | idem_store::RecordState::FailedPermanent
            )
        )
    }

    /// The request it was claimed with.
    pub(crate) fn request(&self) -> &ClaimRequest {
        &self.request
    }

    /// The store's error for this operation's claim, when the store was
    /// unavailable to make it (the claim may be sent again).
    pub(crate) fn store_unavailable(&self) -> Option<&StoreError> {
        self.first.as_ref().err().filter(|e| e.is_unavailable())
    }

    /// The operation with the request it was claimed with, to send again
    /// while keeping this answer.
    pub(crate) fn to_retry(&self) -> ToClaim {
        ToClaim {
            op: self.op.clone(),
            keyed: self.keyed.clone(),
            request: self.request.clone(),
        }
    }

    /// The operation with the request it was claimed with, to send again.
    pub(crate) fn into_retry(self) -> ToClaim {
        ToClaim {
            op: self.op,
            keyed: self.keyed,
            request: self.request,
        }
    }
}

impl Engine {
    /// The first round of [`Engine::begin_derived`] for many operations in
    /// one store call ([`Writes::claim_many`](idem_store::Writes::claim_many):
    /// one round trip on PostgreSQL, one transaction on SQLite). Each
    /// [`FirstClaim`] is then finished with [`Engine::begin_claimed`], which
    /// settles a duplicate as `begin` would (asking the policy, waiting,
    /// taking over). A claim made here is live from now: start its effect
    /// soon (its lease runs) or let it expire. The error is a failure of the
    /// whole store call.
    pub async fn claim_batch(&self, items: Vec<Derived>) -> Result<Vec<FirstClaim>, EngineError> {
        let items = items.into_iter().map(|d| self.to_claim(d)).collect();
        self.claim_batch_keeping(items).await.map_err(|(e, _)| e)
    }

    /// The claim request `derived` is sent with, every time it is sent.
    pub(crate) fn to_claim(&self, (op, keyed): Derived) -> ToClaim {
        let request = self.claim_request(&op, &keyed);
        ToClaim { op, keyed, request }
    }

    /// [`Engine::claim_batch`] of operations whose requests are made,
    /// handing them back when the store call fails, so that a caller
    /// waiting out an outage sends the same requests again (a claim that
    /// committed unseen is then recognised as its own).
    pub(crate) async fn claim_batch_keeping(
        &self,
        items: Vec<ToClaim>,
    ) -> Result<Vec<FirstClaim>, (EngineError, Vec<ToClaim>)> {
        use tracing::Instrument;
        let span = tracing::debug_span!(
            "idem.claim_batch",
            db.system.name = telemetry::db_system(&self.store),
            db.operation.name = "claim",
            db.operation.batch.size = items.len(),
        );
        let (found, fresh) = match self.claim_fresh(&items).instrument(span).await {
            Ok(answers) => answers,
            Err(e) => return Err((e, items)),
        };
        let mut fresh = fresh.into_iter();
        let mut claimed = Vec::with_capacity(items.len());
        for (ToClaim { op, keyed, request }, found) in items.into_iter().zip(found) {
            claimed.push(match found {
                Some(f) => FirstClaim {
                    op,
                    keyed: f.keyed,
                    request: f.request,
                    first: Ok(f.first),
                },
                None => {
                    let Some(first) = fresh.next() else {
                        let e = StoreError::Task(
                            "a batch of claims answered fewer than it was asked".into(),
                        );
                        return Err((EngineError::Store(e), Vec::new()));
                    };
                    FirstClaim {
                        op,
                        keyed,
                        request,
                        first,
                    }
                }
            });
        }
        Ok(claimed)
    }

    /// The store's answers for `items`: what a dual-read found for each,
    /// and the answers to the claims of those it did not, in order.
    #[allow(clippy::type_complexity)]
    async fn claim_fresh(
        &self,
        items: &[ToClaim],
    ) -> Result<
        (
            Vec<Option<super::dual_read::Found>>,
            Vec<Result<ClaimOutcome, StoreError>>,
        ),
        EngineError,
    > {
        self.admission.check(&self.store, &self.policy).await?;
        // During a dual-read window, an operation whose replaced version's
        // record is live settles on it; the rest are claimed together.
        let mut found = Vec::with_capacity(items.len());
        for item in items {
            found.push(self.dual_read_hit(&item.op, &item.keyed).await?);
        }
        let requests: Vec<ClaimRequest> = items
            .iter()
            .zip(&found)
            .filter(|(_, f)| f.is_none())
            .map(|(item, _)| item.request.clone())
            .collect();
        let count = requests.len();
        let outcomes = if count == 0 {
            Vec::new()
        } else {
            self.store.writes().claim_many(requests).await?
        };
        Ok((found, one_answer_each(outcomes, count, "claims")?))
    }

    /// Finishes what [`Engine::claim_batch`] started for one operation: the
    /// same answer [`Engine::begin_derived`] gives.
    pub async fn begin_claimed(&self, claimed: FirstClaim) -> Result<Begin, EngineError> {
        let FirstClaim {
            op,
            keyed,
            request,
            first,
        } = claimed;
        self.settle_traced(&op, keyed, request, Some(first)).await
    }

    /// Records how many executions ended, in one store call
    /// ([`Writes::finish_many`](idem_store::Writes::finish_many): one statement
    /// on PostgreSQL, one commit on SQLite): each result is what
    /// [`Execution::finish`] would have answered (a deposed holder gets
    /// [`EngineError::Fenced`]). The error is a failure of the whole store
    /// call.
    pub async fn finish_batch(
        &self,
        ended: Vec<(Execution, Ending, Outcome)>,
    ) -> Result<Vec<Result<(), EngineError>>, EngineError> {
        let finishes: Vec<Finish> = ended
            .into_iter()
            .map(|(execution, ending, outcome)| execution.into_finish(ending, outcome))
            .collect();
        self.record_finishes(&finishes).await
    }

    /// [`Engine::finish_batch`] for ends already taken out of their
    /// executions, which the caller keeps: it may send the same ends again
    /// (a job riding out a store outage). An end refused only because the
    /// same end was already recorded under its fence (a retry of a commit
    /// whose answer was lost) is answered `Ok`.
    pub(crate) async fn record_finishes(
        &self,
        finishes: &[Finish],
    ) -> Result<Vec<Result<(), EngineError>>, EngineError> {
        use tracing::Instrument;
        let count = finishes.len();
        let span = tracing::debug_span!(
            "idem.finish_batch",
            db.system.name = telemetry::db_system(&self.store),
            db.operation.name = "finish",
            db.operation.batch.size = count,
        );
        async {
            let results = self.store.writes().finish_many(finishes.to_vec()).await?;
            let results = one_answer_each(results, count, "finishes")?;
            let mut answers = Vec::with_capacity(count);
            for (result, finish) in results.into_iter().zip(finishes) {
                answers.push(self.finish_answer(finish, result).await);
            }
            Ok(answers)
        }
        .instrument(span)
        .await
    }

    /// What the store's answer to `finish` means to its holder: an end
    /// refused only because the same end was already recorded under its
    /// fence (a retry of a commit whose answer was lost) is `Ok`.
    pub(super) async fn finish_answer(
        &self,
        finish: &Finish,
        result: Result<(), StoreError>,
    ) -> Result<(), EngineError> {
        let result = match result {
            Err(e)
                if in_doubt::already_recorded(
                    &self.store,
                    &finish.key,
                    finish.fence,
                    finish.ending,
                    &finish.outcome,
                    &e,
                )
                .await =>
            {
                Ok(())
            }
            other => other.map_err(EngineError::from),
        };
        telemetry::finished(&finish.key, finish.fence, finish.ending, &result);
        result
    }
}

/// A batch call's answers, checked to be one per question asked: a store
/// answering fewer or more would pair answers with the wrong operations.
pub(super) fn one_answer_each<T>(
    answers: Vec<T>,
    asked: usize,
    what: &str,
) -> Result<Vec<T>, EngineError> {
    if answers.len() == asked {
        return Ok(answers);
    }
    Err(EngineError::Store(StoreError::Task(format!(
        "the store answered {} of {asked} {what}",
        answers.len()
    ))))
}
