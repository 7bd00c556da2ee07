//! Spans and metrics of the engine: a `tracing` span per begin, finish and
//! resolution (key, fence, answer), and counters and a histogram through
//! the `metrics` facade, so a service exports them with the recorder it
//! already uses (nothing is recorded without one).
//!
//! Metric names (all prefixed `idem_`):
//! - `idem_begin_total{answer}`: begins by answer (`execute`,
//!   `take-over`, `replay`, `in-progress`, `conflict`, `rejected`,
//!   `sent-to-review`, `error`);
//! - `idem_begin_seconds`: how long a begin took once its key was derived
//!   and its namespace admitted: the claim and a duplicate's settling (for
//!   `begin_claimed`, the settling alone: its batch claim belongs to no one
//!   caller);
//! - `idem_finish_total{ending, result}`: completions and failures, `ok`
//!   or `fenced` (a deposed holder) or `error`;
//! - `idem_resolution_total{resolution, result}`: settlements by a person
//!   through [`forensics::review::resolve`](crate::forensics::review::resolve),
//!   `ok` or `refused`;
//! - `idem_duplicates{cause}`: a gauge, set by
//!   [`Analysis::publish_metrics`](crate::forensics::Analysis::publish_metrics)
//!   from the last analysis of the attempt log.

use std::time::Instant;

use idem_store::Ending;

use super::{Begin, EngineError};

/// The `answer` label of a begin's result.
pub(crate) fn answer(result: &Result<Begin, EngineError>) -> &'static str {
    match result {
        Ok(Begin::Execute(e)) if e.is_take_over() => "take-over",
        Ok(Begin::Execute(_)) => "execute",
        Ok(Begin::Replay(_)) => "replay",
        Ok(Begin::InProgress { .. }) => "in-progress",
        Ok(Begin::Conflict { .. }) => "conflict",
        Ok(Begin::Rejected {
            marked_unknown: true,
            ..
        }) => "sent-to-review",
        Ok(Begin::Rejected { .. }) => "rejected",
        Err(_) => "error",
    }
}

/// Counts and times a begin that started at `started`, and records its
/// answer (and fence) on the current span.
pub(crate) fn begun(result: &Result<Begin, EngineError>, started: Instant) {
    let answer = answer(result);
    let span = tracing::Span::current();
    span.record("answer", answer);
    if let Ok(Begin::Execute(e)) = result {
        span.record("fence", e.fence());
    }
    metrics::counter!("idem_begin_total", "answer" => answer).increment(1);
    metrics::histogram!("idem_begin_seconds").record(started.elapsed().as_secs_f64());
}

/// The `ending` label.
pub(crate) fn ending(ending: Ending) -> &'static str {
    ending.state().as_str()
}

/// Counts a holder's end.
pub(crate) fn finished(ending: Ending, result: &Result<(), EngineError>) {
    finished_with(ending, result.as_ref().err());
}

/// Counts a holder's end by its error, if any (an end whose result
/// carries something else: an effect in the store's transaction).
pub(crate) fn finished_with(ending: Ending, error: Option<&EngineError>) {
    let outcome = match error {
        None => "ok",
        Some(EngineError::Fenced(_)) => "fenced",
        Some(_) => "error",
    };
    tracing::Span::current().record("result", outcome);
    metrics::counter!("idem_finish_total", "ending" => self::ending(ending), "result" => outcome)
        .increment(1);
}
