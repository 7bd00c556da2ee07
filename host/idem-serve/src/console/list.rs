//! The console's front page, `GET /console`: a list of records with a
//! search by an operation's field (`invoice_id=R-189`, the filter `idem
//! inspect --field` reads), a choice of which records (waiting for review,
//! completed, settled by a person, all), pages of at most [`PAGE`] rows,
//! each row a link to the record's own page; and below it the duplicates
//! by cause over a chosen window.
//!
//! `?q=invoice_id%3DR-189&state=completed&from=25&window=24h`: every value
//! a person typed travels percent-encoded, and is shown escaped.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use idem::forensics::report::{ReportScope, read_report};
use idem::forensics::review::waiting_records_matching;
use idem::forensics::{Analysis, Cause, ShownOperation};
use idem::store::{ListFilter, RecordKey, RecordState, RecordView, StoreError};
use serde::Deserialize;

use super::page::{self, Notice, esc, url_encoded, utc};
use super::{Caller, caller, html};
use crate::App;

/// Rows on a page: a page is drawn from at most this many records past
/// its offset, whatever the store holds.
pub(crate) const PAGE: usize = 25;
/// The furthest offset a page starts at (a search narrows further).
const MAX_FROM: usize = 100_000;
/// How much of an operation a row shows.
const OPERATION_CHARS: usize = 140;

/// The windows the duplicates (and the settled records) are counted
/// over, as (name, ms).
const WINDOWS: [(&str, u64); 4] = [
    ("1h", 3_600_000),
    ("24h", 86_400_000),
    ("7d", 7 * 86_400_000),
    ("30d", 30 * 86_400_000),
];

/// Which records the list shows, as (name in the URL, what the page says).
const WHICH: [(&str, &str); 4] = [
    ("waiting", "waiting for review"),
    ("completed", "completed"),
    ("settled", "settled by a person"),
    ("all", "all records"),
];

/// `?q=NAME%3DVALUE&state=…&from=N&window=…`.
#[derive(Debug, Deserialize, Default)]
pub(crate) struct ListQuery {
    q: Option<String>,
    state: Option<String>,
    from: Option<String>,
    window: Option<String>,
}

/// What the person asked the list for, read from the query: unknown
/// values fall back to the defaults (waiting, 24h, the first page).
struct Asked {
    /// The search as typed, trimmed.
    search: String,
    /// The field it names, when it is `NAME=VALUE`.
    fields: Vec<(String, String)>,
    which: &'static str,
    window: (&'static str, u64),
    from: usize,
}

impl Asked {
    fn of(query: &ListQuery) -> Result<Asked, (Asked, String)> {
        let which = WHICH
            .iter()
            .map(|(name, _)| *name)
            .find(|name| query.state.as_deref() == Some(*name))
            .unwrap_or(WHICH[0].0);
        let window = *WINDOWS
            .iter()
            .find(|(name, _)| query.window.as_deref() == Some(*name))
            .unwrap_or(&WINDOWS[1]);
        let from = query
            .from
            .as_deref()
            .and_then(|f| f.parse::<usize>().ok())
            .unwrap_or(0)
            .min(MAX_FROM);
        let search = query.q.as_deref().unwrap_or_default().trim().to_string();
        let mut asked = Asked {
            search,
            fields: Vec::new(),
            which,
            window,
            from,
        };
        if asked.search.is_empty() {
            return Ok(asked);
        }
        match asked.search.split_once('=') {
            Some((name, value)) if !name.trim().is_empty() => {
                asked.fields = vec![(name.trim().to_string(), value.trim().to_string())];
                Ok(asked)
            }
            _ => {
                let why = format!(
                    "`{}` is not NAME=VALUE: search by a field of the operation, say invoice_id=R-189",
                    asked.search
                );
                Err((asked, why))
            }
        }
    }

    /// This list's address with another offset, window or choice.
    fn href(&self, which: &str, window: &str, from: usize) -> String {
        let mut href = format!("/console?state={which}&window={window}");
        if !self.search.is_empty() {
            let _ = write!(href, "&q={}", url_encoded(&self.search));
        }
        if from > 0 {
            let _ = write!(href, "&from={from}");
        }
        href
    }
}

/// One row of the list.
struct Row {
    view: Option<RecordView>,
    key: RecordKey,
    /// Why it waits, how it ended, or who settled it and why.
    note: String,
}

/// A page of the list.
struct Listing {
    rows: Vec<Row>,
    /// How many records the choice holds in all, when it is counted
    /// (waiting and settled are; completed and all are not, so that a page
    /// never reads more than its offset and one page).
    total: Option<usize>,
    /// Whether more rows follow this page.
    more: bool,
    analysis: Analysis,
}

/// `GET /console`.
pub(crate) async fn show(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Query(query): Query<ListQuery>,
) -> Response {
    let Some(caller) = caller(&app, &headers) else {
        return html(StatusCode::UNAUTHORIZED, page::login(None));
    };
    match Asked::of(&query) {
        Ok(asked) => render(&app, &caller, &asked, None, StatusCode::OK).await,
        Err((asked, why)) => {
            let notice = Notice::Refused(why);
            render(&app, &caller, &asked, Some(notice), StatusCode::BAD_REQUEST).await
        }
    }
}

/// The list as it first shows, with `notice` on top (a form refused
/// before it named a record).
pub(crate) async fn render_refused(
    app: &App,
    caller: &Caller,
    notice: Notice,
    status: StatusCode,
) -> Response {
    let asked = Asked::of(&ListQuery::default()).unwrap_or_else(|(asked, _)| asked);
    render(app, caller, &asked, Some(notice), status).await
}

async fn render(
    app: &App,
    caller: &Caller,
    asked: &Asked,
    notice: Option<Notice>,
    status: StatusCode,
) -> Response {
    let store = app.engine.store();
    let namespace = app.engine.policy().info().namespace.clone();
    // Every answer given before the page was asked for is on it (answers
    // reach the log in batches).
    app.engine.flush_log().await;
    // A refused search lists nothing rather than everything.
    let refused_search = !asked.search.is_empty() && asked.fields.is_empty();
    let listing = match read(store, &namespace, asked, refused_search).await {
        Ok(listing) => listing,
        Err(e) => {
            return html(
                StatusCode::SERVICE_UNAVAILABLE,
                page::unavailable(&format!("cannot read the store: {e}")),
            );
        }
    };
    let mut out = page::head(&format!("idem review console: {namespace}"));
    page::top(
        &mut out,
        &namespace,
        store.describe(),
        matches!(caller, Caller::Session { .. }),
    );
    page::notice(&mut out, notice.as_ref());
    search_form(&mut out, asked);
    rows(&mut out, asked, &listing);
    duplicates(&mut out, asked, &listing.analysis);
    out.push_str("</body></html>\n");
    html(status, out)
}

async fn read(
    store: &idem::store::Store,
    namespace: &str,
    asked: &Asked,
    nothing: bool,
) -> Result<Listing, StoreError> {
    let now = store.clock().now_ms();
    // The report model over the window; the rows name their operations
    // themselves, so no duplicate's is looked up.
    let window = ReportScope {
        namespace: Some(namespace.to_string()),
        since_ms: Some(now.saturating_sub(asked.window.1)),
        ..ReportScope::default()
    };
    let analysis = read_report(store, &window, 0).await?.analysis;
    let mut listing = Listing {
        rows: Vec::new(),
        total: Some(0),
        more: false,
        analysis,
    };
    if nothing {
        return Ok(listing);
    }
    // The filter `idem inspect --field` reads, in the console's namespace.
    let scope = ListFilter {
        namespace: Some(namespace.to_string()),
        fields: asked.fields.clone(),
        ..ListFilter::default()
    };
    let (from, to) = (asked.from, asked.from + PAGE);
    match asked.which {
        "waiting" => {
            let all = waiting_records_matching(store, &scope).await?;
            listing.total = Some(all.len());
            listing.more = all.len() > to;
            listing.rows = all
                .into_iter()
                .skip(from)
                .take(PAGE)
                .map(|(view, why)| Row {
                    key: view.record.key.clone(),
                    view: Some(view),
                    note: why.to_string(),
                })
                .collect();
        }
        "settled" => {
            // From the attempt log: each resolution names who and why.
            let mut settled: Vec<_> = listing.analysis.settled.iter().rev().cloned().collect();
            if !asked.fields.is_empty() {
                let matching: BTreeSet<RecordKey> = store
                    .records()
                    .list(scope)
                    .await?
                    .into_iter()
                    .map(|v| v.record.key)
                    .collect();
                settled.retain(|s| matching.contains(&s.key));
            }
            listing.total = Some(settled.len());
            listing.more = settled.len() > to;
            let page: Vec<_> = settled.into_iter().skip(from).take(PAGE).collect();
            let keys: Vec<RecordKey> = page.iter().map(|s| s.key.clone()).collect();
            let views = store.records().get_many(&keys).await?;
            listing.rows = page
                .into_iter()
                .zip(views)
                .map(|(s, view)| Row {
                    key: s.key,
                    view,
                    note: format!(
                        "{} by {} at {}: {}",
                        s.resolution,
                        s.by.as_deref().unwrap_or("(unnamed)"),
                        utc(s.at_ms),
                        s.reason.as_deref().unwrap_or("(no reason given)")
                    ),
                })
                .collect();
        }
        which => {
            let views = store
                .records()
                .list(ListFilter {
                    state: (which == "completed").then_some(RecordState::Completed),
                    limit: Some(u32::try_from(to + 1).unwrap_or(u32::MAX)),
                    ..scope
                })
                .await?;
            listing.total = None;
            listing.more = views.len() > to;
            listing.rows = views
                .into_iter()
                .skip(from)
                .take(PAGE)
                .map(|view| Row {
                    key: view.record.key.clone(),
                    note: ended(&view),
                    view: Some(view),
                })
                .collect();
        }
    }
    Ok(listing)
}

/// How a record ended, for a row: its outcome's status, or why it waits.
fn ended(view: &RecordView) -> String {
    if let Some(why) = idem::forensics::review::waits_for_review(view) {
        return why.to_string();
    }
    match &view.record.outcome {
        Some(o) => match &o.error {
            Some(error) => format!("status {}: {error}", o.status),
            None => format!("status {}", o.status),
        },
        None => String::new(),
    }
}

fn search_form(out: &mut String, asked: &Asked) {
    let _ = write!(
        out,
        "<form class=\"search\" method=\"get\" action=\"/console\" role=\"search\">\
         <label for=\"q\">Field</label>\
         <input id=\"q\" name=\"q\" value=\"{}\" placeholder=\"invoice_id=R-189\" size=\"32\">\
         <label for=\"which\">Records</label><select id=\"which\" name=\"state\">",
        esc(&asked.search)
    );
    for (name, label) in WHICH {
        let selected = if name == asked.which { " selected" } else { "" };
        let _ = write!(out, "<option value=\"{name}\"{selected}>{label}</option>");
    }
    let _ = writeln!(
        out,
        "</select><input type=\"hidden\" name=\"window\" value=\"{}\">\
         <button type=\"submit\" id=\"search\">Search</button></form>",
        asked.window.0
    );
}

fn rows(out: &mut String, asked: &Asked, listing: &Listing) {
    let searched = if asked.fields.is_empty() {
        String::new()
    } else {
        format!(" matching <code>{}</code>", esc(&asked.search))
    };
    match (asked.which, listing.total) {
        ("waiting", Some(n)) => {
            let _ = writeln!(
                out,
                "<h2 id=\"list\">{n} record{}{searched} wait{} for review</h2>",
                if n == 1 { "" } else { "s" },
                if n == 1 { "s" } else { "" }
            );
        }
        ("settled", Some(n)) => {
            let _ = writeln!(
                out,
                "<h2 id=\"list\">{n} settlement{} by a person{searched}, last {}</h2>",
                if n == 1 { "" } else { "s" },
                asked.window.0
            );
        }
        (which, _) => {
            let label = WHICH
                .iter()
                .find(|(name, _)| *name == which)
                .map_or("records", |(_, label)| label);
            let _ = writeln!(out, "<h2 id=\"list\">{}{searched}</h2>", capitalised(label));
        }
    }
    if listing.rows.is_empty() {
        out.push_str("<p class=\"meta\" id=\"empty\">No record here.</p>\n");
        return;
    }
    out.push_str("<table class=\"list\"><tr><th>key</th><th>state</th><th>operation</th><th>last changed (UTC)</th><th>fence</th><th></th></tr>");
    for row in &listing.rows {
        let hex = row.key.digest.to_hex();
        let (state, operation, updated, fence) = match &row.view {
            Some(v) => (
                v.record.state.as_str(),
                ShownOperation::of_record(&v.record).line(OPERATION_CHARS),
                utc(v.record.updated_ms),
                v.record.fence.to_string(),
            ),
            None => (
                "gone",
                "(no longer kept)".into(),
                String::new(),
                String::new(),
            ),
        };
        let _ = write!(
            out,
            "<tr><td><a class=\"key\" href=\"{}\">{}</a></td><td>{state}</td><td>{}</td><td class=\"t\">{updated}</td><td>{fence}</td><td>{}</td></tr>",
            page::record_href(&hex),
            &hex[..16],
            esc(&operation),
            esc(&row.note)
        );
    }
    out.push_str("</table>\n");
    let shown_to = asked.from + listing.rows.len();
    let _ = write!(
        out,
        "<p class=\"pages\" id=\"pages\">rows {} to {shown_to}{} ",
        asked.from + 1,
        listing
            .total
            .map(|n| format!(" of {n}"))
            .unwrap_or_default()
    );
    if asked.from > 0 {
        let back = asked.from.saturating_sub(PAGE);
        let _ = write!(
            out,
            "<a id=\"previous\" href=\"{}\">previous</a> ",
            esc(&asked.href(asked.which, asked.window.0, back))
        );
    }
    if listing.more {
        let _ = write!(
            out,
            "<a id=\"next\" href=\"{}\">next</a>",
            esc(&asked.href(asked.which, asked.window.0, shown_to))
        );
    }
    out.push_str("</p>\n");
}

fn capitalised(text: &str) -> String {
    let mut chars = text.chars();
    chars
        .next()
        .map(|c| c.to_uppercase().chain(chars).collect())
        .unwrap_or_default()
}

fn duplicates(out: &mut String, asked: &Asked, a: &Analysis) {
    let _ = write!(
        out,
        "<h2 id=\"duplicates\">Duplicates by cause, last {}</h2><nav>",
        asked.window.0
    );
    for (name, _) in WINDOWS {
        if name == asked.window.0 {
            let _ = write!(out, "<b>{name}</b> ");
        } else {
            let _ = write!(
                out,
                "<a href=\"{}\">{name}</a> ",
                esc(&asked.href(asked.which, name, 0))
            );
        }
    }
    out.push_str("</nav>\n");
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
            let hex = d.key.digest.to_hex();
            let _ = writeln!(
                out,
                "<p class=\"meta\">e.g. <a class=\"key\" href=\"{}\">{}</a>: {}</p>",
                page::record_href(&hex),
                &hex[..16],
                esc(&d.explanation)
            );
        }
    }
}
