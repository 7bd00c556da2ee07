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

use super::outage;
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
            let mut answers = record(&self.engine, vec![finish], self.budget).await;
            return answers
                .pop()
                .unwrap_or_else(|| Err(task_error("the finisher stopped")));
        };
        let (reply, answer) = oneshot::channel();
        tx.send((finish, reply))
            .map_err(|_| task_error("the finisher stopped"))?;
        answer
            .await
            .unwrap_or_else(|_| Err(task_error("the finisher stopped")))
    }
}

fn task_error(why: &str) -> EngineError {
    EngineError::Store(StoreError::Task(why.to_string()))
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
    let mut answers: Vec<Option<Result<(), EngineError>>> = finishes.iter().map(|_| None).collect();
    let mut left: Vec<usize> = (0..finishes.len()).collect();
    let mut backoff = outage::Backoff::new(budget);
    loop {
        // The first try sends the ends as they are; only a retry of some of
        // them copies those.
        let retried: Vec<Finish>;
        let batch = if left.len() == finishes.len() {
            &finishes[..]
        } else {
            retried = left.iter().map(|&i| finishes[i].clone()).collect();
            &retried[..]
        };
        let error = match engine.record_finishes(batch).await {
            Ok(results) => {
                let mut again = Vec::new();
                let mut error = None;
                for (&i, result) in left.iter().zip(results) {
                    match result {
                        Err(e) if e.is_store_unavailable() => {
                            again.push(i);
                            error.get_or_insert(e);
                        }
                        result => answers[i] = Some(result),
                    }
                }
                let Some(error) = error else { break };
                left = again;
                error
            }
            Err(e) if e.is_store_unavailable() => e,
            // Some of these may have been recorded; each is reported as a
            // failure to record (its outcome unknown to this run).
            Err(e) => {
                let why = format!("recording a batch of {} ends failed: {e}", left.len());
                for &i in &left {
                    answers[i] = Some(Err(task_error(&why)));
                }
                break;
            }
        };
        match backoff.after_failure().await {
            outage::Next::Again { first: true } => tracing::warn!(
                "recording {} ends: the store is unavailable ({error}); trying again",
                left.len()
            ),
            outage::Next::Again { first: false } => {}
            outage::Next::GiveUp(lasted) => {
                let why = format!(
                    "the store was unavailable for {:.1} s, past the job's outage budget: {error}",
                    lasted.as_secs_f64()
                );
                for &i in &left {
                    answers[i] = Some(Err(task_error(&why)));
                }
                break;
            }
        }
    }
    answers
        .into_iter()
        .map(|a| a.unwrap_or_else(|| Err(task_error("an end went unanswered"))))
        .collect()
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
