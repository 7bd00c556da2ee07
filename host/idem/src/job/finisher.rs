//! How a job records the ends of its operations: one at a time, or in
//! batches. A batching finisher is one task that takes every end that has
//! arrived by the time it is free and records them in one store call
//! ([`Engine::finish_batch`]: one statement on PostgreSQL, one commit on
//! SQLite). It never waits for more to arrive: under load ends pile up
//! while a call is in flight and the batches grow; alone, an end is
//! recorded at once.
//!
//! Either way a store call that fails because the store is unavailable is
//! sent again until the job's outage budget is spent (see [`super::outage`]):
//! each end is conditional on its fence, and one whose first write
//! committed unseen is recognised, so sending it again is safe. An end
//! still unrecorded after that is the one case where an effect's outcome
//! becomes unknown.

use std::sync::Arc;
use std::time::Duration;

use idem_store::{Finish, StoreError};
use tokio::sync::{mpsc, oneshot};

use super::outage::{self, Answer};
use crate::engine::{Engine, EngineError};

type Reply = oneshot::Sender<Result<(), EngineError>>;
type Pending = (Finish, Reply);

/// Records how executions ended.
pub(crate) struct Finisher {
    engine: Arc<Engine>,
    budget: Duration,
    /// The batching task's queue; `None` records each end in its caller's
    /// task.
    batched: Option<mpsc::UnboundedSender<Pending>>,
}

impl Finisher {
    /// A finisher recording up to `batch` ends per store call (1: one at a
    /// time, in the caller's task), riding out an outage of up to
    /// `budget`. A batching one runs until dropped.
    pub(crate) fn start(engine: Arc<Engine>, batch: usize, budget: Duration) -> Finisher {
        let batched = (batch > 1).then(|| {
            let (tx, rx) = mpsc::unbounded_channel();
            tokio::spawn(serve(engine.clone(), rx, batch, budget));
            tx
        });
        Finisher {
            engine,
            budget,
            batched,
        }
    }

    /// Records an end already taken out of its execution; the answer is
    /// [`crate::engine::Execution::finish`]'s.
    pub(crate) async fn record(&self, finish: Finish) -> Result<(), EngineError> {
        let Some(tx) = &self.batched else {
            return record_one(&self.engine, finish, self.budget).await;
        };
        let (reply, answer) = oneshot::channel();
        tx.send((finish, reply))
            .map_err(|_| task_error("the finisher stopped"))?;
        answer
            .await
            .unwrap_or_else(|_| Err(task_error("the finisher stopped")))
    }
}

pub(super) fn task_error(why: &str) -> EngineError {
    EngineError::Store(StoreError::Task(why.to_string()))
}

/// [`record`] of one end.
pub(super) async fn record_one(
    engine: &Engine,
    finish: Finish,
    budget: Duration,
) -> Result<(), EngineError> {
    record(engine, vec![finish], budget)
        .await
        .pop()
        .unwrap_or_else(|| Err(task_error("an end went unanswered")))
}

/// Records `finishes` in one store call and answers each. While the store
/// is unavailable (the whole call failed so, or some ends did), what is
/// left is sent again, up to `budget`; past it those ends fail, their
/// outcome unknown to the run.
pub(super) async fn record(
    engine: &Engine,
    finishes: Vec<Finish>,
    budget: Duration,
) -> Vec<Result<(), EngineError>> {
    let count = finishes.len();
    let (served, gave_up) = outage::batch_riding_out(
        budget,
        finishes
            .into_iter()
            .enumerate()
            .map(|(i, f)| (f, i))
            .collect(),
        |batch: Vec<Finish>| async move {
            match engine.record_finishes(&batch).await {
                Ok(answers) => Ok(answers.into_iter().zip(batch).collect()),
                Err(e) => Err((e, Some(batch))),
            }
        },
        |(answer, finish)| match answer {
            Err(e) if e.is_store_unavailable() => Answer::Again(e, finish),
            answer => Answer::Served((answer, finish)),
        },
        |e| tracing::warn!("recording ends: the store is unavailable ({e}); trying again"),
    )
    .await;
    let mut answers: Vec<Result<(), EngineError>> = (0..count)
        .map(|_| Err(task_error("an end went unanswered")))
        .collect();
    for ((answer, _), i) in served {
        answers[i] = answer;
    }
    if let Some((why, left)) = gave_up {
        // Some of these may have been recorded; each is reported as a
        // failure to record (its outcome unknown to this run).
        let why = if why.error.is_store_unavailable() {
            outage::describe(&why)
        } else {
            format!(
                "recording a batch of {} ends failed: {}",
                left.len(),
                why.error
            )
        };
        for i in left {
            answers[i] = Err(task_error(&why));
        }
    }
    answers
}

async fn serve(
    engine: Arc<Engine>,
    mut pending: mpsc::UnboundedReceiver<Pending>,
    batch: usize,
    budget: Duration,
) {
    while let Some(first) = pending.recv().await {
        let mut taken = vec![first];
        while taken.len() < batch {
            match pending.try_recv() {
                Ok(next) => taken.push(next),
                Err(_) => break,
            }
        }
        let (finishes, replies): (Vec<_>, Vec<_>) = taken.into_iter().unzip();
        let results = record(&engine, finishes, budget).await;
        for (result, reply) in results.into_iter().zip(replies) {
            let _ = reply.send(result);
        }
    }
}
