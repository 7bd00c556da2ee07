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
use crate::engine::{Begin, Engine, EngineError, Execution};

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
    let mut backoff = outage::Backoff::new(budget);
    loop {
        let error = match engine.claim_batch_keeping(vec![item.clone()]).await {
            Ok(mut claimed) => {
                let Some(claimed) = claimed.pop() else {
                    return Err(EngineError::Store(idem_store::StoreError::Task(
                        "a claim went unanswered".into(),
                    )));
                };
                match claimed.store_unavailable() {
                    Some(e) => EngineError::Store(e.clone()),
                    // Settling a duplicate may call the store again (a
                    // take-over, a wait): unavailable there, the claim is
                    // sent again, and finds a take-over made unseen.
                    None => match engine.begin_claimed(claimed).await {
                        Err(e) if outage::is_unavailable(&e) => e,
                        answer => return answer,
                    },
                }
            }
            Err((e, _)) if outage::is_unavailable(&e) => e,
            Err((e, _)) => return Err(e),
        };
        match backoff.after_failure().await {
            outage::Next::Again { first } => {
                if first {
                    waiting(&error);
                }
            }
            outage::Next::GiveUp(_) => return Err(error),
        }
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
        finisher::record(engine, vec![finish], budget)
            .await
            .pop()
            .unwrap_or_else(|| {
                Err(EngineError::Store(idem_store::StoreError::Task(
                    "an end went unanswered".into(),
                )))
            })
    })
    .await
}
