//! Spans, events and metrics of the engine: a `tracing` span per derive,
//! begin, finish and resolution at debug level, an event at
//! info level (warn for what needs a look) for each thing an operator wants
//! in a service's log, and counters and a histogram through the `metrics`
//! facade, so a service exports them with the recorder it already uses
//! (nothing is recorded without one).
//!
//! Events (their message; the fields say the rest; free text such as a
//! reason is recorded with `Debug`, so control characters arrive escaped):
//! - `idem.finished` (info): a holder recorded its end (`key`, `fence`,
//!   `ending`: `completed`, `failed-retryable` or `failed-permanent`);
//! - `idem.taken_over` (warn): a claim was taken over from an earlier
//!   attempt that may have had its effect (`key`, `fence`, `attempt`);
//! - `idem.replayed` (info): a duplicate got the stored outcome (`key`,
//!   `fence` of the attempt that produced it, `state`, `status`);
//! - `idem.refused` (info): a duplicate was refused (`key`, `answer`:
//!   `conflict`, `rejected` or `sent-to-review`, `status`, `reason`);
//! - `idem.fenced` (warn): a deposed holder's end was refused by its fence
//!   (`key`, `fence`, `ending`);
//! - `idem.resolved` (info): a person settled a record
//!   ([`forensics::review::resolve`](crate::forensics::review::resolve)).
//!
//! A duplicate answered "in progress" and a fresh claim are debug-level
//! (the `idem.begin` span's `idem.answer`): one is a retry's noise, the other
//! is told by its `idem.finished`.
//!
//! Spans (their attributes follow OpenTelemetry's conventions where they
//! are stable, `db.*` for the store's calls; the rest are `idem.*`; an
//! OpenTelemetry layer, such as `idem`'s `otel` feature installs, exports
//! them as they are):
//! - `idem.derive`: the policy's derivation (`idem.namespace`);
//! - `idem.begin`: the claim and a duplicate's settling (`idem.namespace`,
//!   `idem.key`, `idem.holder`, `idem.run_id`, `idem.answer`, and for an
//!   execution `idem.fence`, `idem.attempt`; `db.system.name`,
//!   `db.operation.name` `claim`);
//! - `idem.finish`: a holder's end (`idem.key`, `idem.fence`,
//!   `idem.ending`, `idem.result`; `db.operation.name` `complete` or
//!   `fail`); `idem.finish_batch` for ends written together
//!   (`db.operation.batch.size`);
//! - `idem.effect` ([`crate::job`]): the effect under a held claim
//!   (`idem.key`, `idem.fence`, `idem.attempt`, `idem.effect.outcome`);
//! - `idem.operation` ([`crate::job`], at info): one operation of a job or
//!   a consumer, around all of the above (`messaging.operation.type`
//!   `process` and `idem.message` for a consumer's message).
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

use idem_store::{Ending, Holder, RecordKey, Store};

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
    announce(result, answer);
    let span = tracing::Span::current();
    span.record("idem.answer", answer);
    if let Ok(Begin::Execute(e)) = result {
        span.record("idem.fence", e.fence());
        span.record("idem.attempt", e.attempt());
    }
    if result.is_err() {
        span.record("otel.status_code", "ERROR");
    }
    metrics::counter!("idem_begin_total", "answer" => answer).increment(1);
    metrics::histogram!("idem_begin_seconds").record(started.elapsed().as_secs_f64());
}

/// The info-level event of a begin's answer, if it has one.
fn announce(result: &Result<Begin, EngineError>, answer: &'static str) {
    match result {
        Ok(Begin::Execute(e)) if e.is_take_over() => tracing::warn!(
            key = %e.key(),
            fence = e.fence(),
            attempt = e.attempt(),
            "idem.taken_over"
        ),
        Ok(Begin::Replay(replay)) => tracing::info!(
            key = %replay.key,
            fence = replay.fence,
            state = replay.state.as_str(),
            status = replay.outcome.status,
            "idem.replayed"
        ),
        Ok(
            Begin::Conflict {
                key,
                status,
                reason,
            }
            | Begin::Rejected {
                key,
                status,
                reason,
                ..
            },
        ) => tracing::info!(key = %key, answer, status, reason = ?reason, "idem.refused"),
        _ => {}
    }
}

/// The `ending` label.
pub(crate) fn ending(ending: Ending) -> &'static str {
    ending.state().as_str()
}

/// Counts a holder's end, and says it (the event carries the key and
/// fence itself: the debug span around it is off in a service logging at
/// info).
pub(crate) fn finished(
    key: &RecordKey,
    fence: u64,
    ending: Ending,
    result: &Result<(), EngineError>,
) {
    finished_with(key, fence, ending, result.as_ref().err());
}

/// Counts a holder's end by its error, if any (an end whose result
/// carries something else: an effect in the store's transaction).
pub(crate) fn finished_with(
    key: &RecordKey,
    fence: u64,
    ending: Ending,
    error: Option<&EngineError>,
) {
    let outcome = match error {
        None => "ok",
        Some(EngineError::Fenced(_)) => "fenced",
        Some(_) => "error",
    };
    let span = tracing::Span::current();
    span.record("idem.result", outcome);
    if error.is_some() {
        span.record("otel.status_code", "ERROR");
    }
    let ending_label = self::ending(ending);
    match error {
        None => tracing::info!(key = %key, fence, ending = ending_label, "idem.finished"),
        Some(EngineError::Fenced(e)) => {
            tracing::warn!(key = %key, fence, ending = ending_label, error = %e, "idem.fenced")
        }
        Some(_) => {}
    }
    metrics::counter!("idem_finish_total", "ending" => ending_label, "result" => outcome)
        .increment(1);
}

/// The longest text from outside (a run id, a caller's name) kept in a
/// span's attribute, in bytes.
pub const MAX_ATTRIBUTE: usize = 256;

/// OpenTelemetry's `db.system.name` of `store`: `sqlite`, `postgresql`, or
/// `other_sql` (a store made by an embedder).
pub(crate) fn db_system(store: &Store) -> &'static str {
    let name = store.describe();
    if name.starts_with("sqlite") {
        "sqlite"
    } else if name.starts_with("postgres") {
        "postgresql"
    } else {
        "other_sql"
    }
}

/// Who holds a claim, as the attempt log names it: a caller's own name,
/// or this host and process.
pub(crate) fn holder(holder: &Holder) -> String {
    idem_core::text::bounded(&holder.who(), MAX_ATTRIBUTE)
}

/// The run id a claim is made under, bounded, if any.
pub(crate) fn run_id(holder: &Holder) -> Option<String> {
    holder
        .run_id
        .as_deref()
        .map(|run| idem_core::text::bounded(run, MAX_ATTRIBUTE))
}
