//! Run a closure exactly once per key, heartbeating while it runs.

use std::future::Future;

use idem_core::Operation;
use idem_store::{Outcome, RecordKey};

use super::{Begin, Engine, EngineError, ExecContext};

/// A failed effect, as the closure reports it.
#[derive(Debug, Clone)]
pub struct Failed {
    /// Whether a later duplicate may re-execute.
    pub retryable: bool,
    /// What is stored: the status, any body, and the error message.
    pub outcome: Outcome,
}

// Exhaustive on purpose (not `#[non_exhaustive]`): the effect ran or it did not; why not is a
// [`Begin`], which is non-exhaustive.
/// What [`Engine::run_once`] did.
#[derive(Debug)]
pub enum RunResult {
    /// The closure ran and its result was recorded.
    Executed {
        /// Namespace and key.
        key: RecordKey,
        /// The fencing token the result was recorded under.
        fence: u64,
        /// Which attempt under this key (1 for the first).
        attempt: u32,
        /// What the closure returned: completed, or failed.
        result: Result<Outcome, Failed>,
    },
    /// The closure did not run: what [`Engine::begin`] answered instead (a
    /// replay, in progress, a conflict or a rejection; never
    /// [`Begin::Execute`], which runs the closure).
    NotRun(Begin),
}

impl Engine {
    /// Runs `effect` at most once per key. While it runs, the claim is
    /// heartbeated every third of its lease. Its result is recorded under the
    /// claim's fence; if this holder was deposed meanwhile, the result is not
    /// recorded and [`EngineError::Fenced`] is returned.
    pub async fn run_once<F, Fut>(
        &self,
        op: &Operation,
        effect: F,
    ) -> Result<RunResult, EngineError>
    where
        F: FnOnce(ExecContext) -> Fut,
        Fut: Future<Output = Result<Outcome, Failed>>,
    {
        let execution = match self.begin(op).await? {
            Begin::Execute(e) => e,
            other => return Ok(RunResult::NotRun(other)),
        };
        let ctx = execution.context();
        let heartbeat = spawn_heartbeat(&execution);
        let result = effect(ctx).await;
        heartbeat.abort();
        let (key, fence, attempt) = (
            execution.key().clone(),
            execution.fence(),
            execution.attempt(),
        );
        match &result {
            Ok(outcome) => execution.complete(outcome.clone()).await?,
            Err(failed) => {
                execution
                    .fail(failed.retryable, failed.outcome.clone())
                    .await?
            }
        }
        Ok(RunResult::Executed {
            key,
            fence,
            attempt,
            result,
        })
    }
}

/// Heartbeats the claim every third of its lease until aborted or deposed.
/// Abort the handle when the effect is done.
pub fn spawn_heartbeat(execution: &super::Execution) -> tokio::task::JoinHandle<()> {
    tokio::spawn(heartbeat_loop(execution))
}

/// The heartbeat of [`spawn_heartbeat`] as a future, to poll beside the
/// effect in the caller's own task (no task spawned, no wake-up of another
/// thread per request): every third of the lease it extends the claim; a
/// store that is unavailable is tried again every second at most, and the
/// loop ends only when a heartbeat is refused (the holder was deposed;
/// logged). Drop it when the effect is done.
pub fn heartbeat_loop(
    execution: &super::Execution,
) -> impl std::future::Future<Output = ()> + Send + 'static {
    let (store, key, fence, lease) = execution.heartbeat_handle();
    async move {
        let every = (lease / 3).max(std::time::Duration::from_millis(10));
        // While the store is unavailable, try again sooner: the lease keeps
        // running, and a store back within it should see the claim renewed.
        let again = every.min(std::time::Duration::from_secs(1));
        let (mut wait, mut failing) = (every, false);
        loop {
            tokio::time::sleep(wait).await;
            match store.records().heartbeat(&key, fence, lease).await {
                Ok(_) => (wait, failing) = (every, false),
                Err(e) if e.is_unavailable() => {
                    if !failing {
                        tracing::warn!(key = %key, fence, error = %e, "heartbeat failed; trying again");
                    }
                    (wait, failing) = (again, true);
                }
                Err(e) => {
                    tracing::warn!(key = %key, fence, error = %e, "heartbeat refused; stopping");
                    return;
                }
            }
        }
    }
}
