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
use idem::forensics::review::{timeline, waits_for_review};
use idem::forensics::{ShownOperation, shown_events};
use idem::store::{AttemptEntry, Digest, RecordKey, RecordView};
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
    let read = async {
        let Some(view) = store.records().get(key).await? else {
            return Ok(None);
        };
        let entries = timeline(store, key).await?;
        Ok::<_, idem::store::StoreError>(Some((view, entries)))
    };
    let (view, entries) = match read.await {
        Ok(Some(read)) => read,
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
    let form_token = tokens::form_token(&secret, key, view.record.fence);
    let shown = Shown {
        view: &view,
        entries: &entries,
        form_token: &form_token,
    };
    let mut out = page::head(&format!("idem: record {}", &key.digest.to_hex()[..16]));
    page::top(
        &mut out,
        &key.namespace,
        store.describe(),
        matches!(caller, Caller::Session { .. }),
    );
    page::notice(&mut out, notice.as_ref());
    record_page(&mut out, &shown);
    out.push_str("</body></html>\n");
    html(status, out)
}

/// What a record's page shows.
struct Shown<'a> {
    view: &'a RecordView,
    /// Its attempt-log entries, oldest first.
    entries: &'a [AttemptEntry],
    /// The settle form's token, for the record's key and fence.
    form_token: &'a str,
}

fn record_page(out: &mut String, shown: &Shown<'_>) {
    let view = shown.view;
    let r = &view.record;
    let hex = r.key.digest.to_hex();
    let operation = ShownOperation::of_record(r);
    let _ = write!(
        out,
        "<section class=\"record\" id=\"r-{hex}\"><h3>{hex}</h3><p class=\"op\">{}</p>",
        esc(&operation.line(200))
    );
    if let ShownOperation::Kept { fields, .. } = &operation {
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
    let why = waits_for_review(view);
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
    settled_by(out, shown.entries);
    timeline_table(out, shown.entries);
    if why.is_some() {
        settle_form(out, &hex, r.fence, shown.form_token, false);
    } else if amendable(r, shown.entries) {
        let _ = write!(
            out,
            "<p class=\"why\">A person released or refused it at fence {}: if that was wrong, amend it \
             (both decisions stay in the log; later duplicates get the amended one).</p>",
            r.fence
        );
        settle_form(out, &hex, r.fence, shown.form_token, true);
    }
    out.push_str("</section>\n");
}

/// Whether a person's release or rejection wrote the record's fence, so a
/// person may amend it ([`idem::store::Records::amend`] checks the same).
fn amendable(r: &idem::store::Record, entries: &[AttemptEntry]) -> bool {
    use idem::store::{AttemptEvent, RecordState};
    matches!(
        r.state,
        RecordState::FailedPermanent | RecordState::FailedRetryable
    ) && entries
        .iter()
        .rfind(|e| e.fence == r.fence && (e.event.starts_execution() || e.event.is_resolution()))
        .is_some_and(|e| {
            matches!(
                e.event,
                AttemptEvent::ResolvedReleased | AttemptEvent::ResolvedRejected
            )
        })
}

/// Who settled the record by hand and why, newest first (from the attempt
/// log: a person's resolution carries their name and reason).
fn settled_by(out: &mut String, entries: &[AttemptEntry]) {
    for e in entries.iter().rev().filter(|e| e.actor.is_some()) {
        let _ = write!(
            out,
            "<p class=\"settled\">Settled by <b>{}</b> ({}, fence {}) at {}: {}</p>",
            esc(e.actor.as_deref().unwrap_or_default()),
            e.event.as_str(),
            e.fence,
            utc(e.at_ms),
            esc(e.detail.as_deref().unwrap_or("(no reason given)"))
        );
    }
}

/// The attempt-log timeline, oldest first.
pub(crate) fn timeline_table(out: &mut String, entries: &[AttemptEntry]) {
    out.push_str("<table class=\"timeline\"><tr><th>time (UTC)</th><th>event</th><th>fence</th><th>who</th><th>detail</th></tr>");
    for (e, shown) in entries.iter().zip(shown_events(entries)) {
        let who = match (&e.actor, &e.holder) {
            (Some(actor), _) => format!("{actor} (by hand)"),
            (None, Some(h)) => idem::forensics::shown_holder(h),
            (None, None) => "(the holder of that fence)".into(),
        };
        let _ = write!(
            out,
            "<tr><td class=\"t\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            utc(e.at_ms),
            shown.as_str(),
            e.fence,
            esc(&who),
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
