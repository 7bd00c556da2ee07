//! The effect a job performs for each operation it holds the claim of, and
//! the one mapping from what the effect reports to what is recorded.

use std::future::Future;

use idem_core::Operation;
use idem_store::{Ending, Outcome};
use tracing::Instrument;

use crate::engine::{EngineError, ExecContext, Execution, Failed, heartbeat_loop};

/// What an effect reports when it is done.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum EffectOutcome {
    /// The effect happened: recorded completed, and replayed to every
    /// duplicate.
    Completed(Outcome),
    /// The effect failed: recorded failed, retryable (the policy may let a
    /// duplicate re-execute) or permanent (replayed).
    Failed(Failed),
    /// The effect could not even start, so nothing happened: recorded
    /// failed-retryable with `outcome`. `reason` goes with the operation's
    /// end (see [`super::JobEvent::Ended`]).
    NotStarted {
        /// What is stored.
        outcome: Outcome,
        /// Why it could not start, for an operator.
        reason: String,
    },
    /// Whether the effect happened is unknown (say, the process performing
    /// it was killed). Nothing is recorded: the claim stays until its lease
    /// expires, and then the policy decides what a duplicate gets (the
    /// effect is never re-run blindly).
    Unknown {
        /// Why, for an operator.
        reason: String,
    },
}

/// The side effect a job performs once per key: given the operation and its
/// claim's [`ExecContext`] (key, fence, attempt, take-over, partition; hand
/// the key and the fence downstream), it reports an [`EffectOutcome`].
///
/// Any `Fn(Operation, ExecContext) -> impl Future<Output = EffectOutcome>`
/// closure is an effect; `idem run` implements it by spawning a command.
/// The claim is heartbeated while the effect runs, in the effect's own task
/// (polled beside it): an effect must not block its thread (hand blocking
/// work to `tokio::task::spawn_blocking`), or the claim is not renewed
/// meanwhile.
pub trait Effect: Send + Sync + 'static {
    /// Performs the effect for `op` under the claim `ctx` describes.
    fn run(&self, op: Operation, ctx: ExecContext) -> impl Future<Output = EffectOutcome> + Send;
}

impl<F, Fut> Effect for F
where
    F: Fn(Operation, ExecContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = EffectOutcome> + Send,
{
    fn run(&self, op: Operation, ctx: ExecContext) -> impl Future<Output = EffectOutcome> + Send {
        self(op, ctx)
    }
}

/// What [`run_effect`] did, once its outcome was recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Performed {
    /// Recorded completed.
    Completed,
    /// Recorded failed with the effect's `status`.
    Failed {
        /// The stored outcome's status.
        status: i32,
        /// Whether the failure was recorded retryable.
        retryable: bool,
    },
    /// The effect could not start; recorded failed-retryable.
    NotStarted {
        /// Why, as the effect said.
        reason: String,
    },
    /// Outcome unknown; nothing recorded (the claim expires by itself).
    Unknown {
        /// Why, as the effect said.
        reason: String,
    },
}

/// Runs `effect` for `op` under the held claim `execution`, heartbeating the
/// claim meanwhile, and records how it ended under the claim's fence
/// ([`Execution::finish`]). [`EngineError::Fenced`] means this holder was
/// deposed while the effect ran, and nothing was recorded. `idem exec` runs
/// its command this way; [`super::JobRunner`] does the same for each
/// operation, recording through its batching finisher.
pub async fn run_effect<E: Effect>(
    effect: &E,
    op: Operation,
    execution: Execution,
) -> Result<Performed, EngineError> {
    run_effect_recording(effect, op, execution, async |execution, ending, outcome| {
        execution.finish(ending, outcome).await
    })
    .await
}

/// [`run_effect`], recording the end through `record`.
pub(crate) async fn run_effect_recording<E: Effect>(
    effect: &E,
    op: Operation,
    execution: Execution,
    record: impl AsyncFnOnce(Execution, Ending, Outcome) -> Result<(), EngineError>,
) -> Result<Performed, EngineError> {
    // The heartbeat is polled beside the effect rather than spawned: a task
    // per operation (and the wake-up of another thread to start and to
    // abort it) was a large share of a consumer's cost per message
    // (docs/benchmarks.md, "the consumer's timers"). A refused heartbeat
    // (deposed) ends the beating; the effect runs on, and its end is then
    // refused by the fence.
    let ctx = execution.context();
    let span = tracing::debug_span!(
        "idem.effect",
        idem.key = %ctx.key,
        idem.fence = ctx.fence,
        idem.attempt = ctx.attempt,
        idem.take_over = ctx.take_over,
        idem.effect.outcome = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
    );
    let mut run = std::pin::pin!(effect.run(op, ctx).instrument(span.clone()));
    let reported = tokio::select! {
        reported = &mut run => reported,
        () = heartbeat_loop(&execution) => run.await,
    };
    let told = match &reported {
        EffectOutcome::Completed(_) => "completed",
        EffectOutcome::Failed(Failed {
            retryable: true, ..
        }) => "failed-retryable",
        EffectOutcome::Failed(Failed { .. }) => "failed-permanent",
        EffectOutcome::NotStarted { .. } => "not-started",
        EffectOutcome::Unknown { .. } => "unknown",
    };
    span.record("idem.effect.outcome", told);
    if !matches!(reported, EffectOutcome::Completed(_)) {
        span.record("otel.status_code", "ERROR");
    }
    match reported {
        EffectOutcome::Completed(outcome) => {
            record(execution, Ending::Completed, outcome).await?;
            Ok(Performed::Completed)
        }
        EffectOutcome::Failed(Failed { retryable, outcome }) => {
            let status = outcome.status;
            record(execution, Ending::Failed { retryable }, outcome).await?;
            Ok(Performed::Failed { status, retryable })
        }
        EffectOutcome::NotStarted { outcome, reason } => {
            let failed = Ending::Failed { retryable: true };
            record(execution, failed, outcome).await?;
            Ok(Performed::NotStarted { reason })
        }
        // The execution is dropped unrecorded: its claim stays in progress
        // until its lease expires.
        EffectOutcome::Unknown { reason } => Ok(Performed::Unknown { reason }),
    }
}
