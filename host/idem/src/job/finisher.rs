//! How a run records the end of an operation it ran: one end per store
//! call, from the operation's own slot. The ends of a run's slots that
//! arrive together still share a commit: the store's group commit
//! ([`idem_store::GroupCommit`], which every engine writes through where
//! batches share commits) takes every end queued while a call is in flight
//! into one call, as it does for every other caller of the engine; a run
//! batching them again first only added a task and a hop per end (see
//! docs/benchmarks.md, "one runner").
//!
//! A store call that fails because the store is unavailable is sent again
//! until the run's outage budget is spent (see [`super::outage`]): each end
//! is conditional on its fence, and one whose first write committed unseen
//! is recognised, so sending it again is safe. An end still unrecorded
//! after that is the one case where an effect's outcome becomes unknown.

use std::time::Duration;

use idem_store::{Finish, StoreError};

use super::outage;
use crate::engine::{Engine, EngineError};

/// Records `finish` (an end taken out of its execution; the answer is
/// [`crate::engine::Execution::finish`]'s), sending it again while the
/// store is unavailable for up to `budget`; past it, the store's last
/// error.
pub(crate) async fn record(
    engine: &Engine,
    finish: Finish,
    budget: Duration,
) -> Result<(), EngineError> {
    let finishes = &[finish];
    outage::riding_out(
        budget,
        || async move {
            let mut answers = engine.record_finishes(finishes).await?;
            answers.pop().unwrap_or_else(|| {
                Err(EngineError::Store(StoreError::Task(
                    "an end went unanswered".into(),
                )))
            })
        },
        EngineError::is_store_unavailable,
        |e| tracing::warn!("recording an end: the store is unavailable ({e}); trying again"),
    )
    .await
}
