//! One operation riding out a store outage, as `idem exec` runs it: the
//! claim and the end are each sent again while the store is unavailable,
//! up to a budget, exactly as a job sends its batches (see [`super::outage`]).
//! The claim is sent again as the same request, so a claim that committed
//! while its answer was lost goes on as this one; an end sent again is
//! conditional on its fence and read back when it was already recorded.

use std::time::Duration;

use idem_core::Operation;

use super::effect::{Effect, Performed, run_effect_recording};
use super::{finisher, outage};
use crate::engine::{Begin, Engine, EngineError, Execution, FirstClaim, ToClaim};

/// [`Engine::begin`], trying again while the store is unavailable for up
/// to `budget` (`Duration::ZERO`: give up at the first failure). `waiting`
/// is told once, at an outage's first failure, with what the store said.
/// Past the budget the last error is returned: nothing was started.
pub async fn begin_riding_out(
    engine: &Engine,
    op: &Operation,
    budget: Duration,
    waiting: impl Fn(&EngineError),
) -> Result<Begin, EngineError> {
    let keyed = engine.derive(op)?;
    let item = engine.to_claim((op.clone(), keyed));
    settle_riding_out(engine, item, None, budget, waiting).await
}

/// Settles `item` as [`Engine::begin_claimed`] does, from `first` (a claim
/// already answered) or from a claim of its own; whenever the store is
/// unavailable — for the claim, or for what settling a duplicate asks of
/// it (a take-over, a wait) — the claim is sent again as the same request,
/// so a claim or take-over made unseen is found to be this one.
pub(crate) async fn settle_riding_out(
    engine: &Engine,
    item: ToClaim,
    mut first: Option<FirstClaim>,
    budget: Duration,
    waiting: impl Fn(&EngineError),
) -> Result<Begin, EngineError> {
    outage::riding_out(
        budget,
        || {
            let (first, item) = (first.take(), item.clone());
            async move {
                let claimed = match first {
                    Some(claimed) => claimed,
                    None => claim_one(engine, item).await?,
                };
                if let Some(e) = claimed.store_unavailable() {
                    return Err(EngineError::Store(e.clone()));
                }
                engine.begin_claimed(claimed).await
            }
        },
        EngineError::is_store_unavailable,
        waiting,
    )
    .await
}

/// [`idem_store::open`], trying again while the store is unavailable (a
/// server still starting, a fail-over) for up to `budget`; `waiting` is
/// told once, at the first failure. Anything else (a malformed URL, a
/// schema this idem does not know) is returned at once.
pub async fn open_riding_out(
    url: &str,
    options: idem_store::StoreOptions,
    budget: Duration,
    waiting: impl Fn(&idem_store::StoreError),
) -> Result<idem_store::Store, idem_store::StoreError> {
    outage::riding_out(
        budget,
        || idem_store::open(url, options.clone()),
        idem_store::StoreError::is_unavailable,
        waiting,
    )
    .await
}

/// One claim, in a batch of one.
async fn claim_one(engine: &Engine, item: ToClaim) -> Result<FirstClaim, EngineError> {
    match engine.claim_batch_keeping(vec![item]).await {
        Ok(mut claimed) => claimed
            .pop()
            .ok_or_else(|| finisher::task_error("a claim went unanswered")),
        Err((e, _)) => Err(e),
    }
}

/// [`super::run_effect`], recording the end while the store is
/// unavailable for up to `budget`. Past it the end is not recorded: the
/// error says so, and the effect's outcome is unknown to the store.
pub async fn run_effect_riding_out<E: Effect>(
    effect: &E,
    engine: &Engine,
    op: Operation,
    execution: Execution,
    budget: Duration,
) -> Result<Performed, EngineError> {
    run_effect_recording(effect, op, execution, async |execution, ending, outcome| {
        let finish = execution.into_finish(ending, outcome);
        finisher::record_one(engine, finish, budget).await
    })
    .await
}
