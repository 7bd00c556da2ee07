//! The metrics the engine and the store record (through the `metrics`
//! facade), in Prometheus's text format: `GET /metrics` on `idem serve
//! --metrics` (behind the same token as every call), and the file `idem run
//! --metrics-file` writes for a node exporter's textfile collector.

use std::sync::Arc;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use http::{StatusCode, header};
use idem::forensics::review::waiting_records;
use idem::store::Store;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

use crate::App;

/// Bucket bounds of the `_seconds` histograms: 100 µs to 10 s.
const SECONDS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0,
];
/// Bucket bounds of the group-commit batch sizes.
const SIZES: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0];

/// The name of the review-queue gauge, set when the text is rendered.
pub const REVIEW_WAITING: &str = "idem_review_waiting";

/// The name of the gauge of how long the record that has waited longest
/// for a person has waited (0 when none waits), set when the text is
/// rendered: an alert on the count alone cannot tell a record settled
/// every hour from one forgotten for a week.
pub const REVIEW_OLDEST: &str = "idem_review_oldest_waiting_seconds";

/// A Prometheus recorder installed for this process, and the way to read
/// it back as text.
#[derive(Clone)]
pub struct MetricsExport {
    handle: PrometheusHandle,
}

impl std::fmt::Debug for MetricsExport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MetricsExport")
    }
}

impl MetricsExport {
    /// Installs the process-wide recorder (one per process: it fails if
    /// another recorder was installed first) and describes every metric
    /// idem records.
    pub fn install() -> Result<MetricsExport, String> {
        let failed = |e: metrics_exporter_prometheus::BuildError| {
            format!("cannot install the Prometheus recorder: {e}")
        };
        let handle = PrometheusBuilder::new()
            .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), SECONDS)
            .map_err(failed)?
            .set_buckets_for_metric(Matcher::Full("idem_group_commit_batch_size".into()), SIZES)
            .map_err(failed)?
            .install_recorder()
            .map_err(failed)?;
        describe();
        zeroed();
        Ok(MetricsExport { handle })
    }

    /// The text exposition of everything recorded so far, after setting
    /// [`REVIEW_WAITING`] to the records of `namespace` waiting for a
    /// person in `store` (left as it was, and the failure returned beside
    /// the text, when the store cannot be read).
    pub async fn render(&self, store: &Store, namespace: Option<&str>) -> (String, Option<String>) {
        let failure = match waiting_records(store, namespace).await {
            Ok(waiting) => {
                metrics::gauge!(REVIEW_WAITING).set(waiting.len() as f64);
                let oldest = waiting
                    .iter()
                    .map(|(view, _)| waiting_ms(view))
                    .max()
                    .unwrap_or(0);
                metrics::gauge!(REVIEW_OLDEST).set(oldest as f64 / 1000.0);
                None
            }
            Err(e) => Some(format!("cannot count the records waiting for review: {e}")),
        };
        self.handle.run_upkeep();
        (self.handle.render(), failure)
    }
}

impl MetricsExport {
    /// Serves `GET /metrics` alone on `listener` until `shutdown`
    /// resolves, with no token (bind it where only your Prometheus
    /// reaches): for a process with no API of its own (`idem consume
    /// --metrics`). [`REVIEW_WAITING`] counts the records of `namespace`.
    pub async fn serve_alone(
        self,
        listener: tokio::net::TcpListener,
        store: Store,
        namespace: String,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let shared = Arc::new((self, store, namespace));
        let router = axum::Router::new().route(
            "/metrics",
            axum::routing::get(move || {
                let shared = shared.clone();
                async move {
                    let (export, store, namespace) = &*shared;
                    text_response(export, store, namespace).await
                }
            }),
        );
        axum::serve(listener, router)
            .with_graceful_shutdown(shutdown)
            .await
    }
}

/// The exposition of `export` as a response, a failure to count what waits
/// logged.
async fn text_response(export: &MetricsExport, store: &Store, namespace: &str) -> Response {
    let (text, failure) = export.render(store, Some(namespace)).await;
    if let Some(failure) = failure {
        tracing::warn!("{failure}");
    }
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

/// How long `view`'s record has waited for a person, by the store's
/// clock: since it was sent to review (outcome unknown), or since its
/// lease ran out (in progress, its holder silent).
fn waiting_ms(view: &idem::store::RecordView) -> u64 {
    let since = match view.record.state {
        idem::store::RecordState::InProgress => view.record.lease_until_ms,
        _ => view.record.updated_ms,
    };
    view.now_ms.saturating_sub(since)
}

/// Every series an alert rule reads, present from the first scrape at
/// zero: a rule over a series that does not exist yet (`increase(…)` of a
/// counter never incremented) silently never fires, and a dashboard shows
/// "no data" where it should show 0.
fn zeroed() {
    const ANSWERS: [&str; 8] = [
        "execute",
        "take-over",
        "replay",
        "in-progress",
        "conflict",
        "rejected",
        "sent-to-review",
        "error",
    ];
    for answer in ANSWERS {
        metrics::counter!("idem_begin_total", "answer" => answer).absolute(0);
    }
    for ending in ["completed", "failed-retryable", "failed-permanent"] {
        for result in ["ok", "fenced", "error"] {
            metrics::counter!("idem_finish_total", "ending" => ending, "result" => result)
                .absolute(0);
        }
    }
    for resolution in [
        "resolved-completed",
        "resolved-released",
        "resolved-rejected",
    ] {
        for result in ["ok", "refused"] {
            metrics::counter!(
                "idem_resolution_total",
                "resolution" => resolution,
                "result" => result
            )
            .absolute(0);
        }
    }
    metrics::gauge!(REVIEW_WAITING).set(0.0);
    metrics::gauge!(REVIEW_OLDEST).set(0.0);
}

/// HELP text for each metric, so that a scrape (and `promtool check
/// metrics`) reads what it is.
fn describe() {
    use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
    describe_counter!(
        "idem_begin_total",
        "Operations begun, by the answer each got (execute, take-over, replay, in-progress, conflict, rejected, sent-to-review, error)."
    );
    describe_histogram!(
        "idem_begin_seconds",
        Unit::Seconds,
        "How long a begin's claim and settling took."
    );
    describe_counter!(
        "idem_finish_total",
        "Completions and failures written, by ending and result (ok, fenced: a deposed holder's write refused, error)."
    );
    describe_counter!(
        "idem_resolution_total",
        "Records settled by a person, by resolution and result."
    );
    describe_gauge!(
        "idem_duplicates",
        "Duplicates by cause in the last analysis of the attempt log."
    );
    describe_gauge!(
        REVIEW_WAITING,
        "Records waiting for a person (outcome unknown, or in progress past their lease unless their effect is atomic with their end), counted at the scrape."
    );
    describe_gauge!(
        REVIEW_OLDEST,
        Unit::Seconds,
        "How long the record that has waited longest for a person has waited (0 when none waits), at the scrape."
    );
    describe_histogram!(
        "idem_store_call_seconds",
        Unit::Seconds,
        "How long each store call took, by call."
    );
    describe_gauge!(
        "idem_run_operations",
        "How the operations of the last `idem run` ended, by end (executed, replayed, sent_to_review, unknown, …)."
    );
    describe_counter!(
        "idem_consume_deliveries_total",
        "Deliveries `idem consume` settled, by how each ended (the summary's counts: executed, replayed, refused, …)."
    );
    describe_histogram!(
        "idem_group_commit_batch_size",
        "Writes carried by each store call of the group-commit lane."
    );
}

/// `GET /metrics`.
pub(crate) async fn scrape(State(app): State<Arc<App>>) -> Response {
    let Some(export) = &app.metrics else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let namespace = app.engine.policy().info().namespace.clone();
    text_response(export, app.engine.store(), &namespace).await
}
