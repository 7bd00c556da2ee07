//! The report model as text: `idem report`, `idem report --key` and
//! `idem review`. Every line goes through [`say!`], escaped for a
//! terminal.

use idem::forensics::report::{RecordReport, TimelineEntry, WaitingNow};
use idem::forensics::{Analysis, Cause};

use super::{OPERATION_CHARS, short_key};
use crate::shown::say;
use crate::when;

/// What waits for a person, said first: how many, the first few with
/// their operations, and the command that lists them all.
pub fn waiting(waiting: &WaitingNow) {
    if waiting.total == 0 {
        say!("nothing waits for review");
        return;
    }
    let plural = if waiting.total == 1 { "" } else { "s" };
    let verb = if waiting.total == 1 { "waits" } else { "wait" };
    say!(
        "{} record{plural} {verb} for review: {}",
        waiting.total,
        waiting.command
    );
    for (view, why, operation) in &waiting.first {
        say!(
            "  {}  {}",
            short_key(&view.record.key.to_string()),
            operation.line(OPERATION_CHARS)
        );
        say!("  {:<16}  {why}", "");
    }
    if waiting.total > waiting.first.len() {
        say!("  … and {} more", waiting.total - waiting.first.len());
    }
}

/// The whole report: what waits, the window, the duplicates by cause, the
/// runs, what people settled and the busiest keys. `about` names the
/// store and what was selected.
pub fn report(
    about: &str,
    since: Option<u64>,
    until: Option<u64>,
    a: &Analysis,
    waiting: &WaitingNow,
) {
    self::waiting(waiting);
    say!();
    let window = match (since, until) {
        (None, None) => "the whole log".to_string(),
        (s, u) => format!(
            "{} to {}",
            s.map_or("the start".into(), when::utc),
            u.map_or("now".into(), when::utc)
        ),
    };
    say!(
        "{about}: {} attempt-log entries about {} keys ({window})",
        a.entries,
        a.keys
    );
    say!();
    if a.duplicates.is_empty() {
        say!("no duplicates: every key was asked for once");
    } else {
        say!("duplicates by cause:");
        for (cause, n) in a.causes() {
            let caught = if cause == Cause::KeyDrift {
                "  (NOT prevented: two keys)"
            } else {
                ""
            };
            say!("  {n:>5}  {}{caught}", cause.describe());
            for d in a.duplicates.iter().filter(|d| d.cause == cause).take(2) {
                say!(
                    "         e.g. {}: {}",
                    short_key(&d.key.to_string()),
                    d.explanation
                );
                if let Some(operation) = &d.operation {
                    say!("              {}", operation.line(OPERATION_CHARS));
                }
            }
        }
    }
    if !a.runs.is_empty() {
        say!();
        say!(
            "{:<28} {:<10} {:<21} {:<21} {:>8} {:>8} {:>6} {:>9} {:>6} {:>7}",
            "run",
            "trigger",
            "first",
            "last",
            "executed",
            "replayed",
            "failed",
            "to review",
            "fenced",
            "refused"
        );
        for r in &a.runs {
            say!(
                "{:<28} {:<10} {:<21} {:<21} {:>8} {:>8} {:>6} {:>9} {:>6} {:>7}",
                r.run,
                r.trigger.as_deref().unwrap_or("-"),
                when::utc(r.first_ms),
                when::utc(r.last_ms),
                r.executed,
                r.replayed,
                r.failed,
                r.sent_to_review,
                r.fenced,
                r.refused
            );
        }
    }
    if !a.settled.is_empty() {
        say!();
        say!("settled by a person:");
        for s in &a.settled {
            say!(
                "  {}  {:<18} {}  by {}: {}",
                when::utc(s.at_ms),
                s.resolution,
                short_key(&s.key.to_string()),
                s.by.as_deref().unwrap_or("(unnamed)"),
                s.reason.as_deref().unwrap_or("(no reason given)")
            );
        }
    }
    if !a.busiest.is_empty() {
        say!();
        say!("keys asked for most:");
        for (key, asks) in &a.busiest {
            say!("  {asks:>5}  {key}");
        }
    }
}

/// One record's timeline in the report's window (`idem report --key`): its
/// operation, its cause, then every entry with the run, trigger, attempt
/// and process or name of its caller.
pub fn record_timeline(record: &RecordReport) {
    say!("{}", record.view.record.key);
    say!("operation: {}", record.operation.line(OPERATION_CHARS));
    match &record.cause {
        Some(d) => say!("cause: {} — {}", d.cause.describe(), d.explanation),
        None => say!("asked for once: no duplicate"),
    }
    say!();
    say!(
        "{:<21} {:<18} {:>7} {:<32} detail",
        "time",
        "event",
        "fence",
        "who"
    );
    let mut sorted: Vec<&TimelineEntry> = record.timeline.iter().collect();
    sorted.sort_by_key(|t| (t.entry.at_ms, t.entry.id));
    for t in sorted {
        let e = &t.entry;
        let who = match (&e.holder, &e.actor) {
            (_, Some(actor)) => format!("{actor} (by hand)"),
            (Some(h), None) => format!(
                "{} {} #{} {}",
                h.run_id.as_deref().unwrap_or("-"),
                h.trigger.as_deref().unwrap_or("-"),
                h.attempt.map_or("-".into(), |a| a.to_string()),
                h.who()
            ),
            (None, None) => t.who(),
        };
        say!(
            "{:<21} {:<18} {:>7} {:<32} {}",
            when::utc(e.at_ms),
            t.reads_as.as_str(),
            e.fence,
            who,
            e.detail.as_deref().unwrap_or("")
        );
    }
}

/// A record waiting for review (`idem review`): its operation, why it
/// waits, who held it last, its timeline and the command that settles it
/// on `store`.
pub fn waiting_record(record: &RecordReport, store: &str) {
    let r = &record.view.record;
    say!();
    say!("{} (fence {}, attempt {})", r.key, r.fence, r.attempts);
    say!("  operation: {}", record.operation.line(OPERATION_CHARS));
    if let Some(why) = record.waits {
        say!("  {why}");
    }
    say!(
        "  last held by {} {} on {}",
        r.holder.run_id.as_deref().unwrap_or("-"),
        r.holder.trigger.as_deref().unwrap_or("-"),
        r.holder.who()
    );
    for t in &record.timeline {
        let e = &t.entry;
        say!(
            "    {}  {:<18} fence {:<6} {}{}",
            when::utc(e.at_ms),
            t.reads_as.as_str(),
            e.fence,
            t.who(),
            e.detail
                .as_deref()
                .map(|d| format!(": {d}"))
                .unwrap_or_default()
        );
    }
    say!("  settle: {}", record.resolve_command(store));
}
