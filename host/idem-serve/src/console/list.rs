//! The console's front page, `GET /console`: a list of records with a
//! search by an operation's field (`invoice_id=R-189`, the filter `idem
//! inspect --field` reads), a choice of which records (waiting for review,
//! completed, settled by a person, all), pages of at most [`PAGE`] rows,
//! each row a link to the record's own page; and below it the duplicates
//! by cause over a chosen window.
//!
//! Pages are found by their place, not an offset (keyset paging): "next"
//! lists the rows after the last one shown (`after=UPDATED_MS.KEY`, read
//! by the store with `ListFilter::after`), "previous" the rows before the
//! first one (`before=…`), so a record changed or added meanwhile, which
//! lists first, shifts no row of the page a person moves to. `n` is the
//! number of the page's first row, for its caption only.
//!
//! `?q=invoice_id%3DR-189&state=completed&after=…&n=26&window=24h`: every
//! value a person typed travels percent-encoded, and is shown escaped.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use idem::forensics::report::{ReportScope, read_report};
use idem::forensics::review::waiting_records_matching;
use idem::forensics::{Analysis, ShownOperation};
use idem::store::{Digest, ListCursor, ListFilter, RecordKey, RecordState, RecordView, StoreError};
use serde::Deserialize;

use super::page::{self, Notice, esc, url_encoded, utc};
use super::{Caller, caller, html};
use crate::App;

mod duplicates;

/// Rows on a page.
pub(crate) const PAGE: usize = 25;
/// The most rows "previous" reads above a page (the store lists from the
/// newest down, so the page above is the last of them): a person paging
/// back from further down than this gets the rows this far up.
const MAX_ABOVE: usize = 100_000;
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

/// `?q=NAME%3DVALUE&state=…&after=PLACE&before=PLACE&n=N&window=…`.
#[derive(Debug, Deserialize, Default)]
pub(crate) struct ListQuery {
    q: Option<String>,
    state: Option<String>,
    after: Option<String>,
    before: Option<String>,
    n: Option<String>,
    window: Option<String>,
}

/// A row's place in a list, as a link carries it: `UPDATED_MS.KEY_HEX`
/// (for a settlement, the time it was made). A place that does not read
/// as one is ignored: the list starts at its top.
fn place(text: Option<&str>, namespace: &str) -> Option<ListCursor> {
    let (ms, hex) = text?.split_once('.')?;
    Some(ListCursor {
        updated_ms: ms.parse().ok()?,
        key: RecordKey::new(namespace, Digest::from_hex(hex)?),
    })
}

fn place_text(place: &ListCursor) -> String {
    format!("{}.{}", place.updated_ms, place.key.digest.to_hex())
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
    /// The page is the rows after this place, or before that one.
    after: Option<ListCursor>,
    before: Option<ListCursor>,
    /// The number of its first row, for the caption.
    n: usize,
}

impl Asked {
    /// What was asked, and why the search is refused when it is not
    /// `NAME=VALUE`.
    fn of(query: &ListQuery, namespace: &str) -> (Asked, Option<String>) {
        let which = WHICH
            .iter()
            .map(|(name, _)| *name)
            .find(|name| query.state.as_deref() == Some(*name))
            .unwrap_or(WHICH[0].0);
        let window = *WINDOWS
            .iter()
            .find(|(name, _)| query.window.as_deref() == Some(*name))
            .unwrap_or(&WINDOWS[1]);
        let after = place(query.after.as_deref(), namespace);
        let before = place(query.before.as_deref(), namespace).filter(|_| after.is_none());
        let n = query
            .n
            .as_deref()
            .and_then(|n| n.parse::<usize>().ok())
            .filter(|_| after.is_some() || before.is_some())
            .unwrap_or(1)
            .clamp(1, usize::MAX / 2);
        let search = query.q.as_deref().unwrap_or_default().trim().to_string();
        let mut asked = Asked {
            search,
            fields: Vec::new(),
            which,
            window,
            after,
            before,
            n,
        };
        if asked.search.is_empty() {
            return (asked, None);
        }
        match asked.search.split_once('=') {
            Some((name, value)) if !name.trim().is_empty() => {
                asked.fields = vec![(name.trim().to_string(), value.trim().to_string())];
                (asked, None)
            }
            _ => {
                let why = format!(
                    "`{}` is not NAME=VALUE: search by a field of the operation, say invoice_id=R-189",
                    asked.search
                );
                (asked, Some(why))
            }
        }
    }

    /// This list's address with another window or choice, at its top or
    /// at `page` (`after` or `before`, the place, the first row's number).
    fn href(&self, which: &str, window: &str, page: Option<(&str, &ListCursor, usize)>) -> String {
        let mut href = format!("/console?state={which}&window={window}");
        if !self.search.is_empty() {
            let _ = write!(href, "&q={}", url_encoded(&self.search));
        }
        if let Some((side, at, n)) = page {
            let _ = write!(href, "&{side}={}&n={n}", place_text(at));
        }
        href
    }
}

/// One row of the list.
struct Row {
    view: Option<RecordView>,
    key: RecordKey,
    /// Its place in the list.
    place: ListCursor,
    /// Why it waits, how it ended, or who settled it and why.
    note: String,
}

/// A page of the list.
struct Listing {
    rows: Vec<Row>,
    /// How many records the choice holds in all, when it is counted
    /// (waiting and settled are; completed and all are not, so that a page
    /// reads no more than its own rows from its place on).
    total: Option<usize>,
    /// Whether more rows follow this page, and whether some list above it.
    more: bool,
    above: bool,
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
    let namespace = &app.engine.policy().info().namespace;
    match Asked::of(&query, namespace) {
        (asked, None) => render(&app, &caller, &asked, None, StatusCode::OK).await,
        (asked, Some(why)) => {
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
    let namespace = &app.engine.policy().info().namespace;
    let (asked, _) = Asked::of(&ListQuery::default(), namespace);
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
    duplicates::section(&mut out, asked, &listing.analysis);
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
        above: false,
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
    let rows = match asked.which {
        "waiting" => {
            let all: Vec<Row> = waiting_records_matching(store, &scope)
                .await?
                .into_iter()
                .map(|(view, why)| Row {
                    key: view.record.key.clone(),
                    place: ListCursor::of(&view.record),
                    view: Some(view),
                    note: why.to_string(),
                })
                .collect();
            listing.total = Some(all.len());
            all
        }
        "settled" => {
            // From the attempt log: each resolution names who and why;
            // the latest first (a settlement's place is when it was made).
            let mut settled: Vec<_> = listing.analysis.settled.clone();
            settled.sort_by(|a, b| b.at_ms.cmp(&a.at_ms).then_with(|| a.key.cmp(&b.key)));
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
            settled
                .into_iter()
                .map(|s| Row {
                    place: ListCursor {
                        updated_ms: s.at_ms,
                        key: s.key.clone(),
                    },
                    note: format!(
                        "{} by {} at {}: {}",
                        s.resolution,
                        s.by.as_deref().unwrap_or("(unnamed)"),
                        utc(s.at_ms),
                        s.reason.as_deref().unwrap_or("(no reason given)")
                    ),
                    key: s.key,
                    view: None,
                })
                .collect()
        }
        which => {
            // The store reads from the place on: a page and one row more
            // below it, or every row above it (bounded).
            let limit = if asked.before.is_some() {
                MAX_ABOVE
            } else {
                PAGE + 1
            };
            listing.total = None;
            store
                .records()
                .list(ListFilter {
                    state: (which == "completed").then_some(RecordState::Completed),
                    limit: Some(u32::try_from(limit).unwrap_or(u32::MAX)),
                    after: asked.after.clone(),
                    before: asked.before.clone(),
                    ..scope
                })
                .await?
                .into_iter()
                .map(|view| Row {
                    key: view.record.key.clone(),
                    place: ListCursor::of(&view.record),
                    note: ended(&view),
                    view: Some(view),
                })
                .collect()
        }
    };
    let (page, more, above) = page_of(rows, asked);
    (listing.rows, listing.more, listing.above) = (page, more, above);
    if asked.which == "settled" {
        // Each as it is now, read for the page's rows only.
        let keys: Vec<RecordKey> = listing.rows.iter().map(|r| r.key.clone()).collect();
        let views = store.records().get_many(&keys).await?;
        for (row, view) in listing.rows.iter_mut().zip(views) {
            row.view = view;
        }
    }
    Ok(listing)
}

/// The page `asked` names among `rows` (in the list's order; the store's
/// rows already start at the place asked for, the others are all of the
/// list): the rows after its place, or the last rows before it; whether
/// more follow, and whether some list above it.
fn page_of(rows: Vec<Row>, asked: &Asked) -> (Vec<Row>, bool, bool) {
    let lists_after = |r: &Row, c: &ListCursor| c.lists_after(r.place.updated_ms, &r.place.key);
    let lists_before = |r: &Row, c: &ListCursor| c.lists_before(r.place.updated_ms, &r.place.key);
    if let Some(before) = &asked.before {
        let mut above: Vec<Row> = rows
            .into_iter()
            .filter(|r| lists_before(r, before))
            .collect();
        let more_above = above.len() > PAGE;
        let page = above.split_off(above.len().saturating_sub(PAGE));
        return (page, true, more_above);
    }
    let mut below: Vec<Row> = match &asked.after {
        Some(after) => rows.into_iter().filter(|r| lists_after(r, after)).collect(),
        None => rows,
    };
    let more = below.len() > PAGE;
    below.truncate(PAGE);
    (below, more, asked.after.is_some())
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
        out.push_str("<p class=\"meta\" id=\"empty\">No record here.");
        // A page reached by its place whose rows have all left the list
        // (settled meanwhile): the way back is the first page.
        if asked.after.is_some() || asked.before.is_some() {
            let _ = write!(
                out,
                " <a href=\"{}\">First page</a>",
                esc(&asked.href(asked.which, asked.window.0, None))
            );
        }
        out.push_str("</p>\n");
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
    let last = asked.n + listing.rows.len() - 1;
    let _ = write!(
        out,
        "<p class=\"pages\" id=\"pages\">rows {} to {last}{} ",
        asked.n,
        listing
            .total
            .map(|n| format!(" of {n}"))
            .unwrap_or_default()
    );
    if let (true, Some(first)) = (listing.above, listing.rows.first()) {
        let n = asked.n.saturating_sub(PAGE).max(1);
        let _ = write!(
            out,
            "<a id=\"previous\" href=\"{}\">previous</a> ",
            esc(&asked.href(
                asked.which,
                asked.window.0,
                Some(("before", &first.place, n))
            ))
        );
    }
    if let (true, Some(end)) = (listing.more, listing.rows.last()) {
        let _ = write!(
            out,
            "<a id=\"next\" href=\"{}\">next</a>",
            esc(&asked.href(
                asked.which,
                asked.window.0,
                Some(("after", &end.place, last + 1))
            ))
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
