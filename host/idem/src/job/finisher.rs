//! How a job records the ends of its operations: one at a time, or in
//! batches. A batching finisher is one task that takes every end that has
//! arrived by the time it is free and records them in one store call
//! ([`Engine::finish_batch`]: one statement on PostgreSQL, one commit on
//! SQLite). It never waits for more to arrive: under load ends pile up
//! while a call is in flight and the batches grow; alone, an end is
//! recorded at once.

use std::sync::Arc;

use idem_store::{Ending, Outcome, StoreError};
use tokio::sync::{mpsc, oneshot};

use crate::engine::{Engine, EngineError, Execution};

type Reply = oneshot::Sender<Result<(), EngineError>>;
type Pending = (Execution, Ending, Outcome, Reply);

/// Records how executions ended.
pub(crate) enum Finisher {
    /// Each end in its own store call.
    OneAtATime,
    /// Ends batched by a task of their own.
    Batched(mpsc::UnboundedSender<Pending>),
}

impl Finisher {
    /// A finisher recording up to `batch` ends per store call (1: one at a
    /// time, in the caller's task). A batching one runs until dropped.
    pub(crate) fn start(engine: Arc<Engine>, batch: usize) -> Finisher {
        if batch <= 1 {
            return Finisher::OneAtATime;
        }
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(serve(engine, rx, batch));
        Finisher::Batched(tx)
    }

    /// Records `execution`'s end; the answer is [`Execution::finish`]'s.
    pub(crate) async fn finish(
        &self,
        execution: Execution,
        ending: Ending,
        outcome: Outcome,
    ) -> Result<(), EngineError> {
        let tx = match self {
            Finisher::OneAtATime => return execution.finish(ending, outcome).await,
            Finisher::Batched(tx) => tx,
        };
        let stopped = || EngineError::Store(StoreError::Task("the finisher stopped".into()));
        let (reply, answer) = oneshot::channel();
        tx.send((execution, ending, outcome, reply))
            .map_err(|_| stopped())?;
        answer.await.unwrap_or_else(|_| Err(stopped()))
    }
}

async fn serve(engine: Arc<Engine>, mut pending: mpsc::UnboundedReceiver<Pending>, batch: usize) {
    while let Some(first) = pending.recv().await {
        let mut taken = vec![first];
        while taken.len() < batch {
            match pending.try_recv() {
                Ok(next) => taken.push(next),
                Err(_) => break,
            }
        }
        let size = taken.len();
        let (ended, replies): (Vec<_>, Vec<_>) = taken
            .into_iter()
            .map(|(execution, ending, outcome, reply)| ((execution, ending, outcome), reply))
            .unzip();
        match engine.finish_batch(ended).await {
            Ok(results) => {
                for (result, reply) in results.into_iter().zip(replies) {
                    let _ = reply.send(result);
                }
            }
            // Some of these may have been recorded; each is reported as a
            // failure to record (its outcome unknown to this run).
            Err(e) => {
                let message = format!("recording a batch of {size} failed: {e}");
                for reply in replies {
                    let _ = reply.send(Err(EngineError::Store(StoreError::Task(message.clone()))));
                }
            }
        }
    }
}
