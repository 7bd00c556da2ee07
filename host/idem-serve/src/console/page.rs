//! What every console page shares: server-rendered HTML with no scripts
//! and no outside assets (the answer's Content-Security-Policy forbids
//! both), its head and style, the sign-in page, the pages for a store that
//! cannot be read and a record that does not exist, the notice after a
//! form, and how text reaches markup and URLs.

use std::fmt::Write as _;

// Every text on the page, untrusted or not, is shown this way: a
// control or bidi character in an operation, a reason or a name is spelt
// out, never obeyed.
pub(crate) use crate::html_shown as esc;

/// A line at the top of a page after a form was sent.
pub(crate) enum Notice {
    /// The record with this key was settled.
    Done(String),
    /// The form was refused, and why; nothing changed.
    Refused(String),
}

/// A store-clock time in ms as UTC (`2026-12-04T03:12:05.123Z`).
pub(crate) fn utc(ms: u64) -> String {
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms);
    humantime::format_rfc3339_millis(at).to_string()
}

/// `text` percent-encoded for a URL's query or path (every byte but
/// RFC 3986's unreserved characters): a search such as `invoice_id=R 18&9`
/// travels in a paging link as one value, never as more parameters.
pub(crate) fn url_encoded(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// The address of a record's page (its key is hex: nothing to encode, but
/// it is encoded all the same, so the rule holds whatever a key becomes).
pub(crate) fn record_href(hex: &str) -> String {
    format!("/console/record/{}", url_encoded(hex))
}

const STYLE: &str = "body{font:14px/1.45 system-ui,sans-serif;margin:24px;color:#0f172a;max-width:1100px}\
h1{font-size:20px;margin:0 0 4px}h2{font-size:16px;margin:20px 0 8px}.meta{color:#475569}\
.record{border:1px solid #cbd5e1;border-left:4px solid #7c3aed;border-radius:4px;padding:10px 14px;margin:0 0 14px}\
.record h3{font-size:14px;margin:0 0 4px;font-family:ui-monospace,monospace}.op{font-size:15px;margin:4px 0}\
.why{color:#6d28d9}table{border-collapse:collapse;margin:6px 0}td,th{padding:2px 10px 2px 0;text-align:left;font-size:13px;vertical-align:top}\
th{color:#475569;font-weight:600}form.settle{display:grid;grid-template-columns:max-content 1fr;gap:6px 10px;margin-top:8px;max-width:720px}\
form.settle label{color:#334155}textarea{height:3em}.notice{padding:8px 12px;border-radius:4px;margin:0 0 12px}\
.done{background:#dcfce7}.refused{background:#fee2e2}.cause{margin:2px 0}.n{font-weight:600;display:inline-block;min-width:2.5em}\
nav a{margin-right:10px}button{padding:4px 12px}form.search{display:flex;gap:8px;align-items:center;margin:10px 0}\
table.list{width:100%}table.list td{border-top:1px solid #e2e8f0;padding:4px 10px 4px 0}code,.key{font-family:ui-monospace,monospace}\
.settled{background:#f1f5f9;padding:6px 10px;border-radius:4px}.pages{margin:10px 0}.t{white-space:nowrap}";

/// The head of every page, and the `<body>` it opens.
pub(crate) fn head(title: &str) -> String {
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{}</title><style>{STYLE}</style></head><body>\n",
        esc(title)
    )
}

/// The top of a signed-in page: its title, the namespace and store, the
/// sign-out button and the notice, if any.
pub(crate) fn top(out: &mut String, namespace: &str, store: &str, signed_in: bool) {
    let _ = writeln!(
        out,
        "<h1><a href=\"/console\">idem review console</a></h1><p class=\"meta\">namespace <b>{}</b> on {}</p>",
        esc(namespace),
        esc(store)
    );
    if signed_in {
        out.push_str(
            "<form method=\"post\" action=\"/console/logout\"><button type=\"submit\">Sign out</button></form>\n",
        );
    }
}

/// The notice after a form, if any.
pub(crate) fn notice(out: &mut String, notice: Option<&Notice>) {
    match notice {
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

/// The page for a record that is not there: `what` says which (a key
/// that is not one, or a key with no record), after the notice of a form
/// that named it, if any.
pub(crate) fn not_found(what: &str, form: Option<&Notice>) -> String {
    let mut out = head("idem review console: no such record");
    out.push_str("<h1><a href=\"/console\">idem review console</a></h1>\n");
    notice(&mut out, form);
    let _ = writeln!(
        out,
        "<p class=\"notice refused\" id=\"missing\">{}</p>\
         <p><a href=\"/console?state=all\">Search all records</a></p></body></html>",
        esc(what)
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_search_travels_in_a_link_as_one_value() {
        assert_eq!(url_encoded("invoice_id=R-189"), "invoice_id%3DR-189");
        assert_eq!(
            url_encoded("a b&state=all\"<>/é"),
            "a%20b%26state%3Dall%22%3C%3E%2F%C3%A9"
        );
        assert_eq!(
            record_href(&"ab".repeat(32)),
            format!("/console/record/{}", "ab".repeat(32))
        );
    }
}
