//! The review queue: records waiting for a person, with their timelines,
//! for `idem review` and a service's own admin screen. Settling one is
//! [`Records::resolve`](idem_store::Records::resolve).

use super::ShownOperation;
use idem_store::{
    AttemptEntry, AttemptFilter, ListFilter, RecordKey, RecordState, RecordView, ResolveRequest,
    Store, StoreError,
};

/// A record waiting for review, and what the log says about it.
#[derive(Debug, Clone)]
pub struct Waiting {
    /// The record (outcome-unknown, or in progress past its lease).
    pub view: RecordView,
    /// Why it waits, for people.
    pub why: &'static str,
    /// Its attempt-log entries, oldest first.
    pub timeline: Vec<AttemptEntry>,
    /// The business operation behind it (which charge it was).
    pub operation: ShownOperation,
}

/// Whether a record waits for a person: its outcome is unknown, or its
/// holder's lease expired with no end recorded (the holder may have done
/// the effect). A claim that expired with its effect atomic with its end
/// does not: its holder did nothing that lasts, and the next duplicate
/// re-executes it ([`re_executes_at_next_duplicate`]).
pub fn waits_for_review(view: &RecordView) -> Option<&'static str> {
    match view.record.state {
        RecordState::OutcomeUnknown => {
            Some("outcome unknown: the holder may or may not have done the effect")
        }
        RecordState::InProgress
            if view.lease_remaining_ms == 0 && !re_executes_at_next_duplicate(view) =>
        {
            Some("in progress past its lease: the holder went silent mid-effect")
        }
        _ => None,
    }
}

/// Whether a record is a claim that expired with its effect atomic with
/// its end: nothing was done, no person is needed, and the next duplicate
/// of its operation re-executes it (its policy is told the attempt failed
/// retryably; see `idem_store::Existing::duplicate_context`).
pub fn re_executes_at_next_duplicate(view: &RecordView) -> bool {
    view.record.expired_without_effect(view.now_ms)
}

/// Every record waiting for review (in `namespace`, or all), most
/// recently changed first, with why it waits; no timelines read.
pub async fn waiting_records(
    store: &Store,
    namespace: Option<&str>,
) -> Result<Vec<(RecordView, &'static str)>, StoreError> {
    waiting_records_matching(store, &in_namespace(namespace)).await
}

/// [`waiting_records`] among the records `scope` selects: its namespace,
/// partition and fields narrow the queue, its state (when it names one
/// of the states review looks at, outcome-unknown or in-progress) too;
/// its limit is not read. What `idem review --field` and the console's
/// search read.
pub async fn waiting_records_matching(
    store: &Store,
    scope: &ListFilter,
) -> Result<Vec<(RecordView, &'static str)>, StoreError> {
    Ok(review_states(store, scope)
        .await?
        .into_iter()
        .filter_map(|view| {
            let why = waits_for_review(&view)?;
            Some((view, why))
        })
        .collect())
}

/// The records whose claim expired with their effect atomic with their
/// end (in `namespace`, or all), most recently changed first: in progress
/// past their lease like a record waiting for review, but nothing was
/// done, and each re-executes at its operation's next duplicate.
pub async fn re_executing_records(
    store: &Store,
    namespace: Option<&str>,
) -> Result<Vec<RecordView>, StoreError> {
    re_executing_records_matching(store, &in_namespace(namespace)).await
}

/// [`re_executing_records`] among the records `scope` selects (as
/// [`waiting_records_matching`] reads it).
pub async fn re_executing_records_matching(
    store: &Store,
    scope: &ListFilter,
) -> Result<Vec<RecordView>, StoreError> {
    Ok(review_states(store, scope)
        .await?
        .into_iter()
        .filter(re_executes_at_next_duplicate)
        .collect())
}

fn in_namespace(namespace: Option<&str>) -> ListFilter {
    ListFilter {
        namespace: namespace.map(str::to_string),
        ..ListFilter::default()
    }
}

/// The records in the states review looks at (outcome-unknown, in
/// progress; only `scope.state` when it names one of them, none when it
/// names another), among those `scope` selects, most recently changed
/// first.
async fn review_states(store: &Store, scope: &ListFilter) -> Result<Vec<RecordView>, StoreError> {
    let mut views = Vec::new();
    for state in [RecordState::OutcomeUnknown, RecordState::InProgress] {
        if scope.state.is_some_and(|s| s != state) {
            continue;
        }
        views.extend(
            store
                .records()
                .list(ListFilter {
                    state: Some(state),
                    limit: None,
                    ..scope.clone()
                })
                .await?,
        );
    }
    // The order the console pages by (`ListCursor`): most recently
    // changed first, then by key — records of one batch share a change time,
    // and without the key a page could skip or repeat one of them.
    views.sort_by(|a, b| {
        (b.record.updated_ms.cmp(&a.record.updated_ms))
            .then_with(|| a.record.key.cmp(&b.record.key))
    });
    Ok(views)
}

/// The records waiting for review (in `namespace`, or all), most recently
/// changed first, at most `limit`, each with its timeline and operation;
/// and how many wait in all.
pub async fn waiting_for_review(
    store: &Store,
    namespace: Option<&str>,
    limit: usize,
) -> Result<(Vec<Waiting>, usize), StoreError> {
    waiting_for_review_matching(store, &in_namespace(namespace), limit).await
}

/// [`waiting_for_review`] among the records `scope` selects (as
/// [`waiting_records_matching`] reads it).
pub async fn waiting_for_review_matching(
    store: &Store,
    scope: &ListFilter,
    limit: usize,
) -> Result<(Vec<Waiting>, usize), StoreError> {
    let all = waiting_records_matching(store, scope).await?;
    let total = all.len();
    let mut out = Vec::new();
    for (view, why) in all.into_iter().take(limit) {
        out.push(waiting(store, view, why).await?);
    }
    Ok((out, total))
}

/// A record that waits for review (`why`), with its timeline and
/// operation read.
async fn waiting(
    store: &Store,
    view: RecordView,
    why: &'static str,
) -> Result<Waiting, StoreError> {
    let timeline = timeline(store, &view.record.key).await?;
    let operation = ShownOperation::of_record(&view.record);
    Ok(Waiting {
        view,
        why,
        timeline,
        operation,
    })
}

/// Every attempt-log entry `filter` selects, oldest first, read in pages
/// of 10,000 (a long log never has to fit one query); `filter.limit` and
/// `filter.after_id` are the paging's own. What `idem report` and `idem
/// serve`'s report read before [`analyse`](super::analyse).
pub async fn read_log(
    store: &Store,
    mut filter: AttemptFilter,
) -> Result<Vec<AttemptEntry>, StoreError> {
    const PAGE: u32 = 10_000;
    filter.limit = Some(PAGE);
    let mut out = Vec::new();
    loop {
        let page = store.records().attempts(filter.clone()).await?;
        let full = page.len() == PAGE as usize;
        filter.after_id = page.last().map(|e| e.id).or(filter.after_id);
        out.extend(page);
        if !full {
            return Ok(out);
        }
    }
}

/// One key's attempt-log entries, oldest first.
pub async fn timeline(store: &Store, key: &RecordKey) -> Result<Vec<AttemptEntry>, StoreError> {
    let mut entries = store
        .records()
        .attempts(AttemptFilter {
            key: Some(key.clone()),
            ..AttemptFilter::default()
        })
        .await?;
    entries.sort_by_key(|e| (e.at_ms, e.id));
    Ok(entries)
}

/// Settles a record waiting for review ([`Records::resolve`](idem_store::Records::resolve)) in a span,
/// counted (`idem_resolution_total{resolution, result}`): what `idem serve`'s
/// `resolve` and a service's admin screen call (the `idem resolve` command
/// calls [`Records::resolve`](idem_store::Records::resolve) itself: one process, one settlement, nothing to
/// scrape).
pub async fn resolve(store: &Store, request: ResolveRequest) -> Result<RecordView, StoreError> {
    settle(store, request, false).await
}

/// Amends a person's release or rejection that was wrong
/// ([`Records::amend`](idem_store::Records::amend)), in a span, counted as
/// [`resolve`] is: what the console's amend form calls.
pub async fn amend(store: &Store, request: ResolveRequest) -> Result<RecordView, StoreError> {
    settle(store, request, true).await
}

async fn settle(
    store: &Store,
    request: ResolveRequest,
    amend: bool,
) -> Result<RecordView, StoreError> {
    use tracing::Instrument;
    let resolution = request.resolution.event().as_str();
    let span = tracing::info_span!(
        "idem.resolve",
        key = %request.key,
        fence = request.observed_fence,
        resolution,
        amend,
        // A person's text: escaped by `Debug`.
        by = ?request.by,
    );
    let records = store.records();
    let result = if amend {
        records.amend(request).instrument(span).await
    } else {
        records.resolve(request).instrument(span).await
    };
    let outcome = if result.is_ok() { "ok" } else { "refused" };
    metrics::counter!("idem_resolution_total", "resolution" => resolution, "result" => outcome)
        .increment(1);
    if let Ok(view) = &result {
        tracing::info!(key = %view.record.key, fence = view.record.fence, state = view.record.state.as_str(), "idem.resolved");
    }
    result
}
