//! `idem report --html`: one self-contained page (no scripts, no fetches,
//! no fonts from elsewhere; its Content-Security-Policy forbids them, so a
//! browser would say so if one crept in) with a timeline picture — runs as lanes,
//! attempts as marks coloured by what they got, take-overs and fenced
//! writes drawn so they stand out — and the causes beside it.

use std::fmt::Write as _;

use idem::forensics::report::WaitingNow;
use idem::forensics::{self, Analysis, Caller, Cause, ShownEvent};
// Every text on the page is shown this way: a control or bidi character
// in an operation, a reason or a name is spelt out, never obeyed.
use idem_serve::html_shown as esc;
use idem_store::{AttemptEntry, AttemptEvent};

use super::OPERATION_CHARS;
use crate::when;

/// The colour of an entry's mark, as it reads to a person.
fn colour(shown: ShownEvent) -> &'static str {
    let event = match shown {
        ShownEvent::Retried => return "#0284c7",
        ShownEvent::ReExecuted => return "#0891b2",
        ShownEvent::SentToReview => return "#7c3aed",
        ShownEvent::Stored(event) => event,
        // An event this page does not know (non-exhaustive): unremarkable.
        _ => return "#64748b",
    };
    match event {
        AttemptEvent::Executed => "#2563eb",
        AttemptEvent::TakenOver => "#ea580c",
        AttemptEvent::Completed => "#16a34a",
        AttemptEvent::FailedRetryable | AttemptEvent::FailedPermanent => "#b45309",
        AttemptEvent::MarkedUnknown => "#7c3aed",
        AttemptEvent::Fenced => "#dc2626",
        AttemptEvent::Replayed => "#64748b",
        AttemptEvent::InProgress | AttemptEvent::Conflict | AttemptEvent::Rejected => "#a16207",
        AttemptEvent::ResolvedCompleted
        | AttemptEvent::ResolvedReleased
        | AttemptEvent::ResolvedRejected => "#0f766e",
        // An event this page does not know (non-exhaustive): unremarkable.
        _ => "#64748b",
    }
}

const LANE_H: u32 = 34;
const LEFT: u32 = 190;
const WIDTH: u32 = 1000;

/// The page.
pub fn render(
    title: &str,
    analysis: &Analysis,
    entries: &[AttemptEntry],
    waiting: &WaitingNow,
) -> String {
    let mut html = String::new();
    let _ = writeln!(
        html,
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">\
         <title>{}</title><style>{STYLE}</style></head><body>\n<h1>{}</h1>",
        esc(title),
        esc(title)
    );
    html.push_str(&waiting_html(waiting));
    let _ = writeln!(
        html,
        "<p class=\"meta\">{} entries about {} keys; {} duplicate{}.</p>\n<div class=\"layout\">",
        analysis.entries,
        analysis.keys,
        analysis.duplicates.len(),
        if analysis.duplicates.len() == 1 {
            ""
        } else {
            "s"
        }
    );
    html.push_str(&timeline_svg(analysis, entries));
    html.push_str(&causes_html(analysis));
    html.push_str("</div>\n");
    html.push_str(&legend_html());
    html.push_str(&runs_html(analysis));
    html.push_str(&settled_html(analysis));
    html.push_str("</body></html>\n");
    html
}

const STYLE: &str = "body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#0f172a}\
h1{font-size:20px;margin:0 0 4px}h2{font-size:16px;margin:16px 0 8px}\
.meta{color:#475569;margin:0 0 16px}.layout{display:flex;gap:24px;align-items:flex-start}\
.causes{min-width:320px;max-width:440px}.cause{border-left:4px solid #94a3b8;padding:4px 10px;margin:0 0 10px}\
.cause.key-drift{border-color:#dc2626;background:#fef2f2}.cause .n{font-weight:600}\
.cause p{margin:4px 0;color:#334155;font-size:13px}svg text{font:12px system-ui,sans-serif;fill:#0f172a}\
table{border-collapse:collapse;margin-top:8px}td,th{padding:3px 10px;border-bottom:1px solid #e2e8f0;text-align:left}\
.waiting{border-left:4px solid #7c3aed;background:#f5f3ff;padding:6px 12px;margin:0 0 16px}\
.waiting p{margin:4px 0}.op{color:#334155;font-size:13px}\
.legend span{display:inline-block;margin-right:14px}.legend i{display:inline-block;width:10px;height:10px;border-radius:5px;margin-right:4px;vertical-align:middle}";

/// The lanes (runs, in the order they first appear) and each entry's lane
/// ([`forensics::runs_of`]: its caller, or the run that held its fence).
/// A mark-unknown is drawn on the lane of the run that lost the attempt,
/// and a resolution on a lane of the person who settled it.
fn lanes(entries: &[AttemptEntry]) -> (Vec<String>, Vec<Option<usize>>) {
    // A lane is a caller, or a person; two that read alike keep two lanes.
    let lane_of: Vec<Option<(Option<Caller>, String)>> = forensics::runs_of(entries)
        .into_iter()
        .zip(entries)
        .map(|(run, e)| match e.event {
            AttemptEvent::MarkedUnknown => run.or_else(|| forensics::caller_of(e)),
            event if event.is_resolution() => None,
            _ => run,
        })
        .zip(entries)
        .map(|(caller, e)| match caller {
            Some(caller) => Some((Some(caller.clone()), caller.to_string())),
            None if e.event.is_resolution() => Some((
                None,
                format!("{} (by hand)", e.actor.as_deref().unwrap_or("a person")),
            )),
            None => None,
        })
        .collect();
    let mut first_seen: Vec<(u64, &(Option<Caller>, String))> = Vec::new();
    for (e, lane) in entries.iter().zip(&lane_of) {
        if let Some(lane) = lane
            && !first_seen.iter().any(|(_, seen)| *seen == lane)
        {
            first_seen.push((e.at_ms, lane));
        }
    }
    first_seen.sort_by(|a, b| (a.0, &a.1.1).cmp(&(b.0, &b.1.1)));
    let index = lane_of
        .iter()
        .map(|l| {
            l.as_ref()
                .and_then(|l| first_seen.iter().position(|(_, seen)| *seen == l))
        })
        .collect();
    let names = first_seen
        .iter()
        .map(|(_, (_, name))| name.clone())
        .collect();
    (names, index)
}

fn timeline_svg(_analysis: &Analysis, entries: &[AttemptEntry]) -> String {
    let (names, lane) = lanes(entries);
    let height = 40 + LANE_H * names.len().max(1) as u32 + 30;
    let (t0, t1) = entries.iter().fold((u64::MAX, 0u64), |(lo, hi), e| {
        (lo.min(e.at_ms), hi.max(e.at_ms))
    });
    let span = t1.saturating_sub(t0).max(1) as f64;
    let x =
        |t: u64| LEFT as f64 + (t.saturating_sub(t0) as f64 / span) * f64::from(WIDTH - LEFT - 20);
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        "<svg class=\"timeline\" role=\"img\" aria-label=\"attempts by run over time\" \
         width=\"{WIDTH}\" height=\"{height}\" viewBox=\"0 0 {WIDTH} {height}\" xmlns=\"http://www.w3.org/2000/svg\">"
    );
    for (i, name) in names.iter().enumerate() {
        let y = 40 + LANE_H * i as u32;
        let _ = writeln!(
            svg,
            "<rect x=\"0\" y=\"{}\" width=\"{WIDTH}\" height=\"{LANE_H}\" fill=\"{}\"/>\
             <text x=\"8\" y=\"{}\" class=\"lane\">{}</text>",
            y,
            if i % 2 == 0 { "#f8fafc" } else { "#ffffff" },
            y + LANE_H / 2 + 4,
            esc(name)
        );
    }
    if entries.is_empty() {
        svg.push_str("<text x=\"20\" y=\"60\">the log is empty for this selection</text>\n");
    } else {
        let _ = writeln!(
            svg,
            "<text x=\"{LEFT}\" y=\"24\">{}</text><text x=\"{}\" y=\"24\" text-anchor=\"end\">{}</text>",
            when::utc(t0),
            WIDTH - 20,
            when::utc(t1)
        );
    }
    let shown = forensics::shown_events(entries);
    for ((e, lane), shown) in entries.iter().zip(lane).zip(shown) {
        let Some(lane) = lane else { continue };
        let cx = x(e.at_ms);
        let cy = f64::from(40 + LANE_H * lane as u32 + LANE_H / 2);
        let tip = format!(
            "{} {} fence {} at {}{}",
            shown.as_str(),
            e.key,
            e.fence,
            when::utc(e.at_ms),
            e.detail
                .as_deref()
                .map(|d| format!(": {d}"))
                .unwrap_or_default()
        );
        let fill = colour(shown);
        let mark = match e.event {
            AttemptEvent::MarkedUnknown => format!(
                "<circle class=\"mark marked-unknown\" cx=\"{cx:.1}\" cy=\"{cy:.1}\" r=\"6\" fill=\"none\" stroke=\"{fill}\" stroke-width=\"3\"/>"
            ),
            AttemptEvent::Fenced => format!(
                "<path class=\"mark fenced\" d=\"M{a} {b}L{c} {d}M{a} {d}L{c} {b}\" stroke=\"{fill}\" stroke-width=\"3\"/>",
                a = cx - 6.0,
                b = cy - 6.0,
                c = cx + 6.0,
                d = cy + 6.0
            ),
            AttemptEvent::TakenOver => format!(
                "<path class=\"mark take-over\" d=\"M{cx} {}L{} {cy}L{cx} {}L{} {cy}Z\" fill=\"{fill}\"/>",
                cy - 8.0,
                cx + 8.0,
                cy + 8.0,
                cx - 8.0
            ),
            _ => format!(
                "<circle class=\"mark {}\" cx=\"{cx:.1}\" cy=\"{cy:.1}\" r=\"5\" fill=\"{fill}\"/>",
                shown.as_str()
            ),
        };
        let _ = writeln!(svg, "<g><title>{}</title>{mark}</g>", esc(&tip));
    }
    svg.push_str("</svg>\n");
    svg
}

fn causes_html(a: &Analysis) -> String {
    let mut out = String::from("<section class=\"causes\"><h2>Why it ran twice</h2>\n");
    if a.duplicates.is_empty() {
        out.push_str("<p>No duplicates: every key was asked for once.</p>\n");
    }
    for (cause, n) in a.causes() {
        let _ = write!(
            out,
            "<div class=\"cause {}\"><span class=\"n\">{n}</span> {}{}",
            cause.as_str(),
            esc(cause.describe()),
            if cause == Cause::KeyDrift {
                " <strong>(not prevented)</strong>"
            } else {
                ""
            }
        );
        for d in a.duplicates.iter().filter(|d| d.cause == cause).take(2) {
            let _ = write!(
                out,
                "<p><code>{}</code>: {}",
                esc(&d.key.to_string().chars().take(24).collect::<String>()),
                esc(&d.explanation)
            );
            if let Some(operation) = &d.operation {
                let _ = write!(
                    out,
                    "<br><span class=\"op\">{}</span>",
                    esc(&operation.line(OPERATION_CHARS))
                );
            }
            out.push_str("</p>");
        }
        out.push_str("</div>\n");
    }
    out.push_str("</section>\n");
    out
}

fn legend_html() -> String {
    let mut out = String::from("<p class=\"legend\">");
    let stored = ShownEvent::Stored;
    for (label, shown) in [
        ("executed", stored(AttemptEvent::Executed)),
        (
            "taken over (lease expired)",
            stored(AttemptEvent::TakenOver),
        ),
        ("retried (after a recorded end)", ShownEvent::Retried),
        (
            "re-executed (an atomic claim expired: nothing was done)",
            ShownEvent::ReExecuted,
        ),
        ("completed", stored(AttemptEvent::Completed)),
        ("failed", stored(AttemptEvent::FailedRetryable)),
        (
            "sent to review (ring: the lost attempt)",
            ShownEvent::SentToReview,
        ),
        ("fenced (late write refused)", stored(AttemptEvent::Fenced)),
        ("replayed", stored(AttemptEvent::Replayed)),
        (
            "in progress / conflict / rejected",
            stored(AttemptEvent::InProgress),
        ),
        (
            "resolved by a person",
            stored(AttemptEvent::ResolvedCompleted),
        ),
    ] {
        let _ = write!(
            out,
            "<span><i style=\"background:{}\"></i>{label}</span>",
            colour(shown)
        );
    }
    out.push_str("</p>\n");
    out
}

fn runs_html(a: &Analysis) -> String {
    let mut out = String::from(
        "<h2>Runs</h2><table><tr><th>run</th><th>trigger</th><th>first</th><th>last</th>\
         <th>executed</th><th>replayed</th><th>failed</th><th>sent to review</th><th>fenced</th><th>refused</th></tr>\n",
    );
    for r in &a.runs {
        let _ = writeln!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&r.run),
            esc(r.trigger.as_deref().unwrap_or("-")),
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
    out.push_str("</table>\n");
    out
}

/// What waits for a person, first on the page.
fn waiting_html(waiting: &WaitingNow) -> String {
    if waiting.total == 0 {
        return "<section class=\"waiting\"><p>Nothing waits for review.</p></section>\n".into();
    }
    let mut out = format!(
        "<section class=\"waiting\"><h2>{} record{} wait{} for review</h2><p>List them all: <code>{}</code></p>\n",
        waiting.total,
        if waiting.total == 1 { "" } else { "s" },
        if waiting.total == 1 { "s" } else { "" },
        esc(&waiting.command)
    );
    for (view, why, operation) in &waiting.first {
        let _ = writeln!(
            out,
            "<p><code>{}</code> {}<br><span class=\"op\">{}</span></p>",
            esc(&view
                .record
                .key
                .to_string()
                .chars()
                .take(24)
                .collect::<String>()),
            esc(&operation.line(OPERATION_CHARS)),
            esc(why)
        );
    }
    if waiting.total > waiting.first.len() {
        let _ = writeln!(
            out,
            "<p>… and {} more</p>",
            waiting.total - waiting.first.len()
        );
    }
    out.push_str("</section>\n");
    out
}

/// The records people settled: acts, not runs.
fn settled_html(a: &Analysis) -> String {
    if a.settled.is_empty() {
        return String::new();
    }
    let mut out = String::from(
        "<h2>Settled by a person</h2><table><tr><th>when</th><th>resolution</th><th>key</th><th>by</th><th>reason</th></tr>\n",
    );
    for s in &a.settled {
        let _ = writeln!(
            out,
            "<tr><td>{}</td><td>{}</td><td><code>{}</code></td><td>{}</td><td>{}</td></tr>",
            when::utc(s.at_ms),
            s.resolution,
            esc(&s.key.to_string().chars().take(24).collect::<String>()),
            esc(s.by.as_deref().unwrap_or("(unnamed)")),
            esc(s.reason.as_deref().unwrap_or("(no reason given)"))
        );
    }
    out.push_str("</table>\n");
    out
}
