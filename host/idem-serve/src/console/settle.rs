//! Settling a record from its page, `POST /console/resolve`: the form's
//! token checked against the caller's secret, the record's key and the
//! fence the page showed, the person's text checked, then
//! [`review::resolve`] (logged with who and why, counted), or
//! [`review::amend`] for the form that amends a person's release or
//! rejection — conditional on that fence, so a stale page cannot overwrite
//! a newer outcome. A
//! refusal shows the record's page again, saying why and, when the record
//! moved on, what it is now and who settled it.

use std::sync::Arc;

use axum::Form;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use idem::forensics::review;
use idem::store::{
    AttemptFilter, Holder, Outcome, RecordKey, Resolution, ResolveRequest, StoreError,
};
use serde::Deserialize;

use super::page;
use super::{caller, html, list, record, see_other, tokens};
use crate::App;

/// The resolve form.
#[derive(Debug, Deserialize)]
pub(crate) struct ResolveForm {
    key: String,
    fence: u64,
    form_token: String,
    resolution: String,
    #[serde(default)]
    status: String,
    #[serde(default)]
    body: String,
    #[serde(default)]
    reason: String,
    #[serde(default)]
    by: String,
    /// `yes` when the person ticked that refusing for good is meant.
    #[serde(default)]
    confirm_reject: String,
    /// `yes` on the form that amends a person's release or rejection.
    #[serde(default)]
    amend: String,
}

/// `POST /console/resolve`: settles one record, conditional on the fence
/// the page showed.
pub(crate) async fn resolve(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Form(form): Form<ResolveForm>,
) -> Response {
    let Some(caller) = caller(&app, &headers) else {
        return html(StatusCode::UNAUTHORIZED, page::login(None));
    };
    let console = app.console.as_ref().expect("the console is on");
    let namespace = app.engine.policy().info().namespace.clone();
    let refuse = |why: String| page::Notice::Refused(why);
    let Some(digest) = idem::store::Digest::from_hex(&form.key) else {
        let notice = refuse(format!("`{}` is not a record key", form.key));
        return list::render_refused(&app, &caller, notice, StatusCode::BAD_REQUEST).await;
    };
    let key = RecordKey::new(namespace, digest);
    let secret = caller.secret(&console.server_secret);
    if !tokens::form_token_matches(&secret, &key, form.fence, &form.form_token) {
        // A form from another session, another page, or another site.
        let notice = refuse(
            "the form's token does not match this session: reload the page and try again".into(),
        );
        return record::render(&app, &caller, &key, Some(notice), StatusCode::FORBIDDEN).await;
    }
    let (reason, by) = (form.reason.trim(), form.by.trim());
    if reason.is_empty() || by.is_empty() {
        let notice = refuse("say who decides and why: both are kept in the attempt log".into());
        return record::render(&app, &caller, &key, Some(notice), StatusCode::BAD_REQUEST).await;
    }
    for (text, name) in [
        (reason, "why"),
        (by, "who decides"),
        (&form.body[..], "body"),
    ] {
        if let Some(why) = idem::core::text::unstorable(text) {
            let notice = refuse(format!("“{name}” {why}: nothing changed"));
            return record::render(&app, &caller, &key, Some(notice), StatusCode::BAD_REQUEST)
                .await;
        }
    }
    let status = match form.status.trim() {
        "" => None,
        text => match text.parse::<i32>() {
            Ok(n) if crate::api::STATUS_RANGE.contains(&n) => Some(n),
            _ => {
                let (low, high) = (
                    crate::api::STATUS_RANGE.start(),
                    crate::api::STATUS_RANGE.end(),
                );
                let notice = refuse(format!(
                    "status `{text}` is not a whole number from {low} to {high} (an exit status or an HTTP status)"
                ));
                return record::render(&app, &caller, &key, Some(notice), StatusCode::BAD_REQUEST)
                    .await;
            }
        },
    };
    let resolution = match form.resolution.as_str() {
        "completed" => Resolution::Completed(Outcome::new(
            status.unwrap_or(0),
            form.body.clone().into_bytes(),
        )),
        "release" => Resolution::Release,
        // Every later retry of the operation gets this refusal: a mistake
        // here is the hardest to undo, so it is asked twice.
        "reject" if form.confirm_reject != "yes" => {
            let notice = refuse(
                "refusing for good needs its box ticked (every retry of this operation will be \
                 refused): nothing changed"
                    .into(),
            );
            return record::render(&app, &caller, &key, Some(notice), StatusCode::BAD_REQUEST)
                .await;
        }
        "reject" => Resolution::Reject {
            status: status.unwrap_or(1),
        },
        other => {
            let notice = refuse(format!(
                "`{other}` is not a resolution (completed, release or reject)"
            ));
            return record::render(&app, &caller, &key, Some(notice), StatusCode::BAD_REQUEST)
                .await;
        }
    };
    let mut holder = Holder::this_process();
    holder.trigger = Some("manual".into());
    let request = ResolveRequest {
        key: key.clone(),
        observed_fence: form.fence,
        resolution,
        by: format!("{by} (console)"),
        reason: reason.to_string(),
        holder,
    };
    let settled = if form.amend == "yes" {
        review::amend(app.engine.store(), request).await
    } else {
        review::resolve(app.engine.store(), request).await
    };
    match settled {
        Ok(_) => see_other(&format!(
            "{}?done=1",
            page::record_href(&key.digest.to_hex())
        )),
        Err(e) => {
            // The status the API gives the same refusal: a request the store
            // finds invalid (a reason past what the log keeps, a body past
            // the cap) is the form's fault (400), an outage is 503, a record
            // that moved on is 409.
            let status = crate::problem::store_error(e.clone()).0.status;
            let why = match &e {
                StoreError::Fenced { .. } | StoreError::NotEligible { .. } => {
                    moved_on(app.engine.store(), &key, form.fence).await
                }
                StoreError::InvalidRequest(why) => format!("{why}: nothing changed"),
                other if status.is_server_error() => {
                    format!("the store could not be reached: {other}; nothing changed, try again")
                }
                other => format!("the store refused it: {other}"),
            };
            record::render(&app, &caller, &key, Some(refuse(why)), status).await
        }
    }
}

/// Why a settle form was refused for a record that moved on since its page
/// was drawn: what the record is now and, when a person settled it since,
/// who and how (from the attempt log), and whether it still waits below.
async fn moved_on(store: &idem::store::Store, key: &idem::store::RecordKey, shown: u64) -> String {
    let Ok(Some(now)) = store.records().get(key).await else {
        return format!(
            "the record moved on since this page showed fence {shown}: nothing changed"
        );
    };
    let mut why = format!(
        "the record moved on since this page showed fence {shown}: it is {} at fence {} now",
        now.record.state.as_str(),
        now.record.fence
    );
    let log = store
        .records()
        .attempts(AttemptFilter {
            key: Some(key.clone()),
            ..AttemptFilter::default()
        })
        .await
        .unwrap_or_default();
    if let Some(settled) = log
        .iter()
        .rev()
        .find(|e| e.actor.is_some() && e.fence > shown)
    {
        why.push_str(&format!(
            "; {} settled it ({}{})",
            settled.actor.as_deref().unwrap_or_default(),
            settled.event.as_str(),
            settled
                .detail
                .as_deref()
                .map(|d| format!(": {d}"))
                .unwrap_or_default()
        ));
    }
    why.push_str(if review::waits_for_review(&now).is_some() {
        "; nothing changed; look at it again below"
    } else {
        "; nothing changed"
    });
    why
}
