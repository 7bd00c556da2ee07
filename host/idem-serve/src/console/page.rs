//! The console's HTML: server-rendered, no scripts, no outside assets (the
//! answer's Content-Security-Policy forbids both).

use std::fmt::Write as _;

use idem::forensics::review::Waiting;
use idem::forensics::{Analysis, Cause, ShownOperation, shown_events};

// Every text on the page, untrusted or not, is shown this way: a
// control or bidi character in an operation, a reason or a name is spelt
// out, never obeyed.
use crate::html_shown as esc;

/// How much of an operation a line shows.
const OPERATION_CHARS: usize = 200;

/// A line at the top of the page after a form was sent.
pub(crate) enum Notice {
    /// The record with this key was settled.
    Done(String),
    /// The form was refused, and why; nothing changed.
    Refused(String),
}

/// What the console page shows.
pub(crate) struct View<'a> {
    pub(crate) namespace: &'a str,
    pub(crate) store: &'a str,
    pub(crate) waiting: &'a [Waiting],
    pub(crate) total: usize,
    /// Each waiting record's form token, in order.
    pub(crate) forms: &'a [String],
    pub(crate) analysis: &'a Analysis,
    pub(crate) window: &'a str,
    pub(crate) windows: Vec<&'static str>,
    pub(crate) notice: Option<Notice>,
    pub(crate) signed_in: bool,
}

/// A store-clock time in ms as UTC (`2026-12-04T03:12:05.123Z`).
fn utc(ms: u64) -> String {
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms);
    humantime::format_rfc3339_millis(at).to_string()
}

/// Only the characters a window name has (`24h`): anything else dropped,
/// so a value echoed into a URL cannot carry more.
pub(crate) fn url_safe(text: &str) -> String {
    text.chars().filter(char::is_ascii_alphanumeric).collect()
}

const STYLE: &str = "body{font:14px/1.45 system-ui,sans-serif;margin:24px;color:#0f172a;max-width:1100px}\
h1{font-size:20px;margin:0 0 4px}h2{font-size:16px;margin:20px 0 8px}.meta{color:#475569}\
.record{border:1px solid #cbd5e1;border-left:4px solid #7c3aed;border-radius:4px;padding:10px 14px;margin:0 0 14px}\
.record h3{font-size:14px;margin:0 0 4px;font-family:ui-monospace,monospace}.op{font-size:15px;margin:4px 0}\
.why{color:#6d28d9}table{border-collapse:collapse;margin:6px 0}td,th{padding:2px 10px 2px 0;text-align:left;font-size:13px}\
th{color:#475569;font-weight:600}form.settle{display:grid;grid-template-columns:max-content 1fr;gap:6px 10px;margin-top:8px;max-width:720px}\
form.settle label{color:#334155}textarea{height:3em}.notice{padding:8px 12px;border-radius:4px;margin:0 0 12px}\
.done{background:#dcfce7}.refused{background:#fee2e2}.cause{margin:2px 0}.n{font-weight:600;display:inline-block;min-width:2.5em}\
nav a{margin-right:10px}button{padding:4px 12px}";

fn head(title: &str) -> String {
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{}</title><style>{STYLE}</style></head><body>\n",
        esc(title)
    )
}

/// The sign-in page: the sidecar's token, sent once in a form body.
pub(crate) fn login(error: Option<&str>) -> String {
    let mut out = head("idem review console: sign in");
    out.push_str("<h1>idem review console</h1>\n");
    if let Some(error) = error {
        let _ = write!(out, "<p class=\"notice refused\">{}</p>", esc(error));
    }
    out.push_str(
        "<form method=\"post\" action=\"/console/login\">\
         <p><label for=\"token\">This server's token</label><br>\
         <input id=\"token\" name=\"token\" type=\"password\" autocomplete=\"off\" size=\"40\" required></p>\
         <p><button type=\"submit\" id=\"sign-in\">Sign in</button></p></form>\
         <p class=\"meta\">The token opens a session for 8 hours; it is never put in a URL.</p>\
         </body></html>\n",
    );
    out
}

/// The page when the store cannot be read.
pub(crate) fn unavailable(why: &str) -> String {
    let mut out = head("idem review console");
    let _ = writeln!(
        out,
        "<h1>idem review console</h1><p class=\"notice refused\">{}</p><p><a href=\"/console\">Try again</a></p></body></html>",
        esc(why)
    );
    out
}

/// The console.
pub(crate) fn console(view: &View<'_>) -> String {
    let mut out = head(&format!("idem review console: {}", view.namespace));
    let _ = writeln!(
        out,
        "<h1>idem review console</h1><p class=\"meta\">namespace <b>{}</b> on {}</p>",
        esc(view.namespace),
        esc(view.store)
    );
    if view.signed_in {
        out.push_str(
            "<form method=\"post\" action=\"/console/logout\"><button type=\"submit\">Sign out</button></form>\n",
        );
    }
    match &view.notice {
        Some(Notice::Done(key)) => {
            let _ = writeln!(
                out,
                "<p class=\"notice done\" id=\"notice\">Settled <code>{}</code>: logged with who and why.</p>",
                esc(key)
            );
        }
        Some(Notice::Refused(why)) => {
            let _ = writeln!(
                out,
                "<p class=\"notice refused\" id=\"notice\">{}</p>",
                esc(why)
            );
        }
        None => {}
    }
    waiting(&mut out, view);
    duplicates(&mut out, view);
    out.push_str("</body></html>\n");
    out
}

fn waiting(out: &mut String, view: &View<'_>) {
    let _ = writeln!(
        out,
        "<h2 id=\"waiting\">{} record{} wait{} for review</h2>",
        view.total,
        if view.total == 1 { "" } else { "s" },
        if view.total == 1 { "s" } else { "" }
    );
    if view.total > view.waiting.len() {
        let _ = writeln!(
            out,
            "<p class=\"meta\">The {} changed last are shown; settle them to see the rest.</p>",
            view.waiting.len()
        );
    }
    for (w, form_token) in view.waiting.iter().zip(view.forms) {
        record(out, w, form_token, view.window);
    }
}

fn record(out: &mut String, w: &Waiting, form_token: &str, window: &str) {
    let r = &w.view.record;
    let hex = r.key.digest.to_hex();
    let _ = write!(
        out,
        "<section class=\"record\" id=\"r-{hex}\"><h3>{hex}</h3>\
         <p class=\"op\">{}</p>",
        esc(&w.operation.line(OPERATION_CHARS))
    );
    if let ShownOperation::Kept { fields, .. } = &w.operation {
        out.push_str("<table class=\"fields\">");
        for (name, value) in fields {
            let _ = write!(
                out,
                "<tr><th>{}</th><td>{}</td></tr>",
                esc(name),
                esc(value)
            );
        }
        out.push_str("</table>");
    }
    let _ = write!(
        out,
        "<p class=\"why\">{}</p><p class=\"meta\">{} at fence {}, attempt {}; last held by {} on {}:{}</p>",
        esc(w.why),
        r.state.as_str(),
        r.fence,
        r.attempts,
        esc(r.holder.run_id.as_deref().unwrap_or("a caller with no run")),
        esc(&r.holder.host),
        r.holder.pid
    );
    out.push_str("<table class=\"timeline\"><tr><th>time (UTC)</th><th>event</th><th>fence</th><th>who</th><th>detail</th></tr>");
    for (e, shown) in w.timeline.iter().zip(shown_events(&w.timeline)) {
        let who = match (&e.actor, &e.holder) {
            (Some(actor), _) => format!("{actor} (by hand)"),
            (None, Some(h)) => h
                .run_id
                .clone()
                .unwrap_or_else(|| format!("{}:{}", h.host, h.pid)),
            (None, None) => "(the holder of that fence)".into(),
        };
        let _ = write!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            utc(e.at_ms),
            shown.as_str(),
            e.fence,
            esc(&who),
            esc(e.detail.as_deref().unwrap_or(""))
        );
    }
    out.push_str("</table>");
    let _ = writeln!(
        out,
        "<form class=\"settle\" method=\"post\" action=\"/console/resolve\">\
         <input type=\"hidden\" name=\"key\" value=\"{hex}\">\
         <input type=\"hidden\" name=\"fence\" value=\"{fence}\">\
         <input type=\"hidden\" name=\"form_token\" value=\"{form_token}\">\
         <input type=\"hidden\" name=\"window\" value=\"{window}\">\
         <label>What happened</label><span>\
         <label><input type=\"radio\" name=\"resolution\" value=\"completed\" required> it happened (record completed)</label> \
         <label><input type=\"radio\" name=\"resolution\" value=\"release\"> it did not happen (let it run again)</label> \
         <label><input type=\"radio\" name=\"resolution\" value=\"reject\"> refuse it for good</label></span>\
         <span></span><label><input type=\"checkbox\" name=\"confirm_reject\" value=\"yes\"> to refuse it for good: I am sure (every retry of this operation will be refused)</label>\
         <label for=\"status-{hex}\">Status</label><input id=\"status-{hex}\" name=\"status\" inputmode=\"numeric\" placeholder=\"0 for completed, 1 for reject\">\
         <label for=\"body-{hex}\">Body (completed)</label><textarea id=\"body-{hex}\" name=\"body\" placeholder=\"e.g. the provider's receipt\"></textarea>\
         <label for=\"reason-{hex}\">Why</label><input id=\"reason-{hex}\" name=\"reason\" required placeholder=\"what you checked\">\
         <label for=\"by-{hex}\">Who decides</label><input id=\"by-{hex}\" name=\"by\" required>\
         <span></span><span><button type=\"submit\" id=\"settle-{hex}\">Settle at fence {fence}</button></span>\
         </form></section>",
        fence = r.fence,
        form_token = esc(form_token),
        window = esc(window),
    );
}

fn duplicates(out: &mut String, view: &View<'_>) {
    let _ = write!(
        out,
        "<h2 id=\"duplicates\">Duplicates by cause, last {}</h2><nav>",
        esc(view.window)
    );
    for name in &view.windows {
        if *name == view.window {
            let _ = write!(out, "<b>{name}</b> ");
        } else {
            let _ = write!(out, "<a href=\"/console?window={name}\">{name}</a> ");
        }
    }
    out.push_str("</nav>\n");
    let a = view.analysis;
    let plural = |n: usize| if n == 1 { "" } else { "s" };
    let _ = writeln!(
        out,
        "<p class=\"meta\">{} attempt-log entr{} about {} key{}.</p>",
        a.entries,
        if a.entries == 1 { "y" } else { "ies" },
        a.keys,
        plural(a.keys)
    );
    if a.duplicates.is_empty() {
        out.push_str("<p>No duplicates in this window: every key was asked for once.</p>\n");
    }
    for (cause, n) in a.causes() {
        let _ = write!(
            out,
            "<p class=\"cause\"><span class=\"n\">{n}</span>{}{}</p>",
            esc(cause.describe()),
            if cause == Cause::KeyDrift {
                " <strong>(not prevented)</strong>"
            } else {
                ""
            }
        );
        if let Some(d) = a.duplicates.iter().find(|d| d.cause == cause) {
            let _ = writeln!(
                out,
                "<p class=\"meta\">e.g. <code>{}</code>: {}</p>",
                esc(&d.key.digest.to_hex()[..16]),
                esc(&d.explanation)
            );
        }
    }
}
