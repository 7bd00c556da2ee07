//! The report model as JSON: `idem report --json` and `idem review
//! --json`. The member names are an interface: scripts read them.

use idem::forensics::report::{RecordReport, Report, TimelineEntry, WaitingNow};
use idem_store::Holder;
use serde_json::{Value, json};

use crate::when;

/// One timeline entry.
pub fn entry(t: &TimelineEntry) -> Value {
    let e = &t.entry;
    json!({
        "id": e.id,
        "key": e.key.to_string(),
        "fence": e.fence,
        "event": e.event.as_str(),
        "reads_as": t.reads_as.as_str(),
        "at_ms": e.at_ms,
        "at": when::utc(e.at_ms),
        "run_id": e.holder.as_ref().and_then(|h| h.run_id.clone()),
        "trigger": e.holder.as_ref().and_then(|h| h.trigger.clone()),
        "attempt": e.holder.as_ref().and_then(|h| h.attempt),
        "host": e.holder.as_ref().map(|h| h.host.clone()),
        "pid": e.holder.as_ref().map(|h| h.pid),
        "who": e.holder.as_ref().map(Holder::who),
        "policy": e.policy_digest,
        "operation": e.operation_digest.map(|d| d.to_hex()),
        "actor": e.actor,
        "detail": e.detail,
    })
}

/// A timeline.
pub fn timeline(entries: &[TimelineEntry]) -> Value {
    entries.iter().map(entry).collect()
}

/// What waits for a person, as a report leads with it.
pub fn waiting(waiting: &WaitingNow) -> Value {
    json!({
        "total": waiting.total,
        "command": waiting.command,
        "first": waiting.first.iter().map(|(view, why, operation)| json!({
            "key": view.record.key.to_string(),
            "state": view.record.state.as_str(),
            "fence": view.record.fence,
            "why": why,
            "operation": operation,
        })).collect::<Vec<_>>(),
    })
}

/// A report: its analysis, then `about` (what it was asked for), then
/// `waiting` and, for one key, `timeline`.
pub fn report<'a>(
    report: &Report,
    about: impl IntoIterator<Item = (&'a str, Value)>,
    waiting: &WaitingNow,
    timeline: Option<&[TimelineEntry]>,
) -> Value {
    let mut out = serde_json::to_value(&report.analysis).expect("an analysis serialises");
    for (name, value) in about {
        out[name] = value;
    }
    out["waiting_for_review"] = self::waiting(waiting);
    if let Some(entries) = timeline {
        out["timeline"] = self::timeline(entries);
    }
    out
}

/// A record waiting for review, with its timeline (`idem review --json`).
pub fn waiting_record(record: &RecordReport) -> Value {
    let r = &record.view.record;
    json!({
        "key": r.key.to_string(),
        "state": r.state.as_str(),
        "fence": r.fence,
        "attempts": r.attempts,
        "why": record.waits,
        "operation": record.operation,
        "updated_ms": r.updated_ms,
        "holder": {
            "run_id": r.holder.run_id, "trigger": r.holder.trigger,
            "host": r.holder.host, "pid": r.holder.pid,
            "who": r.holder.who(),
        },
        "timeline": timeline(&record.timeline),
    })
}
