//! A record's own page, `GET /console/record/{key}`: the business
//! operation behind it, its state, fence, last holder, lease and outcome,
//! who settled it and why, its attempt-log timeline, and the form that
//! settles it while it waits for a person (signed for its key and the
//! fence shown). A key that is not one, or names no record, is a `404`
//! page.

use std::fmt::Write as _;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use idem::forensics::ShownOperation;
use idem::forensics::report::{RecordReport, TimelineEntry};
use idem::store::{Digest, RecordKey};
use serde::Deserialize;

use super::page::{self, Notice, esc, utc};
use super::{Caller, caller, html, tokens};
use crate::App;

/// How much of an outcome's body the page shows.
const BODY_CHARS: usize = 2_000;

/// `?done=1` after a settle form went through.
#[derive(Debug, Deserialize, Default)]
pub(crate) struct RecordQuery {
    done: Option<String>,
}

/// `GET /console/record/{key}`.
pub(crate) async fn show(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Path(key): Path<String>,
    Query(query): Query<RecordQuery>,
) -> Response {
    let Some(caller) = caller(&app, &headers) else {
        return html(StatusCode::UNAUTHORIZED, page::login(None));
    };
    let namespace = app.engine.policy().info().namespace.clone();
    let Some(digest) = Digest::from_hex(&key) else {
        return html(
            StatusCode::NOT_FOUND,
            page::not_found(
                &format!("`{key}` is not a record key (64 hex characters)"),
                None,
            ),
        );
    };
    let key = RecordKey::new(namespace, digest);
    let notice = query.done.map(|_| Notice::Done(key.digest.to_hex()));
    render(&app, &caller, &key, notice, StatusCode::OK).await
}

/// The page of the record `key`, with `notice` on top, answered with
/// `status` (a refused form's status; `404` when there is no such record).
pub(crate) async fn render(
    app: &App,
    caller: &Caller,
    key: &RecordKey,
    notice: Option<Notice>,
    status: StatusCode,
) -> Response {
    let console = app.console.as_ref().expect("the console is on");
    let store = app.engine.store();
    // Every answer given before the page was asked for is on it.
    app.engine.flush_log().await;
    let record = match RecordReport::read(store, key).await {
        Ok(Some(record)) => record,
        Ok(None) => {
            // A refused form keeps its own status (a forged form is 403
            // whether or not its key names a record).
            let status = if status.is_success() {
                StatusCode::NOT_FOUND
            } else {
                status
            };
            let what = format!(
                "no record with key {} in namespace {} (past its retention, or never claimed)",
                key.digest.to_hex(),
                key.namespace
            );
            return html(status, page::not_found(&what, notice.as_ref()));
        }
        Err(e) => {
            return html(
                StatusCode::SERVICE_UNAVAILABLE,
                page::unavailable(&format!("cannot read the store: {e}")),
            );
        }
    };
    let secret = caller.secret(&console.server_secret);
    let form_token = tokens::form_token(&secret, key, record.view.record.fence);
    let mut out = page::head(&format!("idem: record {}", &key.digest.to_hex()[..16]));
    page::top(
        &mut out,
        &key.namespace,
        store.describe(),
        matches!(caller, Caller::Session { .. }),
    );
    page::notice(&mut out, notice.as_ref());
    record_page(&mut out, &record, &form_token);
    out.push_str("</body></html>\n");
    html(status, out)
}

/// The record's part of the page; its settle form signed with
/// `form_token` (for its key and the fence shown).
fn record_page(out: &mut String, record: &RecordReport, form_token: &str) {
    let view = &record.view;
    let r = &view.record;
    let hex = r.key.digest.to_hex();
    let operation = &record.operation;
    let _ = write!(
        out,
        "<section class=\"record\" id=\"r-{hex}\"><h3>{hex}</h3><p class=\"op\">{}</p>",
        esc(&operation.line(200))
    );
    if let ShownOperation::Kept { fields, .. } = operation {
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
    let why = record.waits;
    if let Some(why) = why {
        let _ = write!(out, "<p class=\"why\">waits for review: {}</p>", esc(why));
    }
    let _ = write!(
        out,
        "<table class=\"facts\"><tr><th>state</th><td id=\"state\">{}</td></tr>\
         <tr><th>fence</th><td>{}</td></tr><tr><th>attempts</th><td>{}</td></tr>\
         <tr><th>last held by</th><td>{} on {}</td></tr>\
         <tr><th>claimed</th><td>{}</td></tr><tr><th>last changed</th><td>{}</td></tr>\
         <tr><th>lease left</th><td>{}</td></tr><tr><th>kept until</th><td>{}</td></tr>",
        r.state.as_str(),
        r.fence,
        r.attempts,
        esc(r.holder.run_id.as_deref().unwrap_or("a caller with no run")),
        esc(&r.holder.who()),
        utc(r.created_ms),
        utc(r.updated_ms),
        if view.lease_remaining_ms > 0 {
            format!("{} ms", view.lease_remaining_ms)
        } else {
            "none".into()
        },
        utc(r.retain_until_ms),
    );
    if let Some(outcome) = &r.outcome {
        let body = String::from_utf8_lossy(&outcome.body);
        let body: String = body.chars().take(BODY_CHARS).collect();
        let _ = write!(
            out,
            "<tr><th>outcome</th><td>status {}: <code>{}</code>{}</td></tr>",
            outcome.status,
            esc(&body),
            outcome
                .error
                .as_deref()
                .map(|e| format!(" (error: {})", esc(e)))
                .unwrap_or_default()
        );
    }
    out.push_str("</table>");
    settled_by(out, record);
    timeline_table(out, &record.timeline);
    if why.is_some() {
        settle_form(out, &hex, r.fence, form_token, false);
    } else if record.amendable {
        let _ = write!(
            out,
            "<p class=\"why\">A person released or refused it at fence {}: if that was wrong, amend it \
             (both decisions stay in the log; later duplicates get the amended one).</p>",
            r.fence
        );
        settle_form(out, &hex, r.fence, form_token, true);
    }
    out.push_str("</section>\n");
}

/// Who settled the record by hand and why, newest first (from the attempt
/// log: a person's resolution carries their name and reason).
fn settled_by(out: &mut String, record: &RecordReport) {
    for s in record.settled.iter().rev() {
        let _ = write!(
            out,
            "<p class=\"settled\">Settled by <b>{}</b> ({}, fence {}) at {}: {}</p>",
            esc(s.by.as_deref().unwrap_or_default()),
            s.resolution,
            s.fence,
            utc(s.at_ms),
            esc(s.reason.as_deref().unwrap_or("(no reason given)"))
        );
    }
}

/// The attempt-log timeline, oldest first.
fn timeline_table(out: &mut String, timeline: &[TimelineEntry]) {
    out.push_str("<table class=\"timeline\"><tr><th>time (UTC)</th><th>event</th><th>fence</th><th>who</th><th>detail</th></tr>");
    for t in timeline {
        let e = &t.entry;
        let _ = write!(
            out,
            "<tr><td class=\"t\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            utc(e.at_ms),
            t.reads_as.as_str(),
            e.fence,
            esc(&t.who()),
            esc(e.detail.as_deref().unwrap_or(""))
        );
    }
    out.push_str("</table>");
}

/// The form that settles the record at the fence the page shows, or
/// (`amend`) settles again what a person settled wrongly.
fn settle_form(out: &mut String, hex: &str, fence: u64, form_token: &str, amend: bool) {
    let (amend_field, button, verb) = if amend {
        (
            "<input type=\"hidden\" name=\"amend\" value=\"yes\">",
            "amend",
            "Amend",
        )
    } else {
        ("", "settle", "Settle")
    };
    let _ = writeln!(
        out,
        "<form class=\"settle\" method=\"post\" action=\"/console/resolve\">{amend_field}\
         <input type=\"hidden\" name=\"key\" value=\"{hex}\">\
         <input type=\"hidden\" name=\"fence\" value=\"{fence}\">\
         <input type=\"hidden\" name=\"form_token\" value=\"{form_token}\">\
         <label>What happened</label><span>\
         <label><input type=\"radio\" name=\"resolution\" value=\"completed\" required> it happened (record completed)</label> \
         <label><input type=\"radio\" name=\"resolution\" value=\"release\"> it did not happen (let it run again)</label> \
         <label><input type=\"radio\" name=\"resolution\" value=\"reject\"> refuse it for good</label></span>\
         <span></span><label><input type=\"checkbox\" name=\"confirm_reject\" value=\"yes\"> to refuse it for good: I am sure (every retry of this operation will be refused)</label>\
         <label for=\"status-{hex}\">Status</label><input id=\"status-{hex}\" name=\"status\" inputmode=\"numeric\" placeholder=\"0 for completed, 1 for reject\">\
         <label for=\"body-{hex}\">Body (completed)</label><textarea id=\"body-{hex}\" name=\"body\" placeholder=\"e.g. the provider's receipt\"></textarea>\
         <label for=\"reason-{hex}\">Why</label><input id=\"reason-{hex}\" name=\"reason\" required placeholder=\"what you checked\">\
         <label for=\"by-{hex}\">Who decides</label><input id=\"by-{hex}\" name=\"by\" required>\
         <span></span><span><button type=\"submit\" id=\"{button}-{hex}\">{verb} at fence {fence}</button></span>\
         </form>",
        form_token = esc(form_token),
    );
}
