//! One handler per route: parse, call the library, answer. No handler
//! holds state between calls; every write after begin is the store's
//! fence-conditional write.

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode, header};
use idem::core::Operation;
use idem::engine::{Begin, Engine, EngineError};
use idem::forensics;
use idem::forensics::report::{ReportScope, read_report};
use idem::store::{
    CallerName, Database, Ending, Holder, Outcome, RecordKey, RecordState, Resolution,
    ResolveRequest as StoreResolve, StoreError,
};
use serde_json::{Value, json};

use crate::App;
use crate::api::{
    BeginRequest, CompleteRequest, FailRequest, HeartbeatRequest, OperationRequest, ReportRequest,
    ResolutionKind, ResolveRequest, body_bytes, check_integer, check_status, check_text,
    outcome_json, parse_key,
};
use crate::json::Api;
use crate::problem::{ApiError, Problem, engine_error, invalid, store_error};

type Answer = Result<Response, ApiError>;

/// The shortest and longest lease a heartbeat may ask for (as `--lease`).
const LEASE_BOUNDS_MS: (u64, u64) = (1_000, 24 * 3_600_000);

impl App {
    /// The operation member, parsed under the policy's limits.
    fn operation(&self, value: Value) -> Result<Operation, ApiError> {
        Operation::from_value(value, &self.engine.policy().limits().operation).map_err(|e| {
            invalid(
                Some("operation"),
                format!("`operation` is not a valid operation: {e}"),
            )
        })
    }

    /// A key the client carries back, in this policy's namespace.
    fn record_key(&self, text: &str, member: &str) -> Result<RecordKey, ApiError> {
        Ok(RecordKey::new(
            self.engine.policy().info().namespace.clone(),
            parse_key(text, member)?,
        ))
    }

    fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Refuses `"atomic": true` unless a client can complete inside its
    /// own transaction: only on a PostgreSQL store, whose database the
    /// client shares (a SQLite file is the sidecar's alone, and memory
    /// holds nothing a client could write beside). A claim that said so
    /// wrongly would be run again after an effect that happened.
    async fn completes_in_client_transaction(&self) -> Result<(), ApiError> {
        let refused = |what: &str| {
            invalid(
                Some("atomic"),
                format!(
                    "`atomic` needs a PostgreSQL store, where the client completes in its own transaction on the same database; {what}"
                ),
            )
        };
        match self.engine.store().database().await {
            Ok(Database::Postgres(_)) => Ok(()),
            Ok(_) => Err(refused(
                "this store is SQLite, whose file only the sidecar writes",
            )),
            Err(StoreError::NotTransactional { .. }) => Err(refused(
                "this store keeps nothing a client's transaction could share",
            )),
            Err(e) => Err(store_error(e)),
        }
    }
}

/// `POST /v1/derive`: the key, fingerprint and partition, without the store.
pub(crate) async fn derive(State(app): State<Arc<App>>, Api(req): Api<OperationRequest>) -> Answer {
    let op = app.operation(req.operation)?;
    let keyed = app.engine().derive(&op).map_err(engine_error)?;
    let lease_ms = app
        .engine()
        .options()
        .lease
        .map_or(u64::from(keyed.lease_s) * 1000, |l| l.as_millis() as u64);
    Ok(Json(json!({
        "namespace": keyed.namespace,
        "key": keyed.key.to_hex(),
        "fingerprint": keyed.fingerprint.to_hex(),
        "partition": keyed.partition,
        "lease_ms": lease_ms,
        "retention_s": keyed.retention_s,
        "policy": app.engine().policy().digest(),
    }))
    .into_response())
}

/// What a client answered `in-progress` is told to wait when the policy
/// gives no shorter hint: about how long a call usually takes.
const IN_FLIGHT_RETRY_AFTER: std::time::Duration = std::time::Duration::from_secs(1);

/// `POST /v1/begin`: the claim, or what the policy says a duplicate gets.
pub(crate) async fn begin(State(app): State<Arc<App>>, Api(req): Api<BeginRequest>) -> Answer {
    let op = app.operation(req.operation)?;
    let caller = req
        .caller
        .as_deref()
        .map(|text| {
            CallerName::parse(text)
                .map_err(|why| invalid(Some("caller"), format!("`caller` {why}: nothing was done")))
        })
        .transpose()?;
    if req.atomic {
        app.completes_in_client_transaction().await?;
    }
    let begun = match &caller {
        Some(caller) => app.engine().begin_for(&op, caller, req.atomic).await,
        None if req.atomic => app.engine().begin_in_store(&op).await,
        None => app.engine().begin(&op).await,
    }
    .map_err(engine_error)?;
    let mut retry_after = None;
    // As the HTTP layer: the policy's hint when shorter than the lease
    // left, else a second, never past the lease (a shipped policy's hint
    // is the whole lease: a minute for a 0.2 s call).
    let in_flight_after = begun.in_flight_retry_after_ms(IN_FLIGHT_RETRY_AFTER);
    let body = match begun {
        // The execution is dropped here, not ended: the claim lives in the
        // store until the client completes, fails or heartbeats it under
        // this fence, or its lease ends.
        Begin::Execute(execution) => json!({
            "answer": "execute",
            "namespace": execution.key().namespace,
            "key": execution.key_hex(),
            "fence": execution.fence(),
            "attempt": execution.attempt(),
            "take_over": execution.is_take_over(),
            "partition": execution.derivation().partition,
            "lease_ms": execution.lease().as_millis() as u64,
            "lease_until_ms": execution.lease_until_ms(),
        }),
        Begin::Replay(replay) => json!({
            "answer": "replay",
            "key": replay.key.digest.to_hex(),
            "state": replay.state.as_str(),
            "fence": replay.fence,
            "outcome": outcome_json(&replay.outcome),
        }),
        Begin::InProgress {
            key,
            lease_remaining_ms,
            reason,
            ..
        } => {
            retry_after = in_flight_after;
            json!({
                "answer": "in-progress",
                "key": key.digest.to_hex(),
                "retry_after_ms": in_flight_after,
                "lease_remaining_ms": lease_remaining_ms,
                "reason": reason,
            })
        }
        Begin::Conflict {
            key,
            status,
            reason,
        } => json!({
            "answer": "conflict",
            "key": key.digest.to_hex(),
            "status": status,
            "reason": reason,
        }),
        Begin::Rejected {
            key,
            status,
            reason,
            retry_after_ms,
            marked_unknown,
        } => {
            retry_after = retry_after_ms;
            json!({
                "answer": "rejected",
                "key": key.digest.to_hex(),
                "status": status,
                "reason": reason,
                "retry_after_ms": retry_after_ms,
                "sent_to_review": marked_unknown,
            })
        }
        // `Begin` is non-exhaustive: an answer of a later engine that this
        // server does not know; nothing is held for the client.
        other => {
            tracing::error!(answer = ?other, "an answer of the engine this server does not know");
            return Err(ApiError(Problem::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "unknown-answer",
                "The idempotency engine gave an answer this server does not know",
                "nothing was claimed for this request",
            )));
        }
    };
    let mut response = Json(body).into_response();
    if let Some(ms) = retry_after {
        response.headers_mut().insert(
            header::RETRY_AFTER,
            HeaderValue::from(ms.div_ceil(1000).max(1)),
        );
    }
    Ok(response)
}

/// `POST /v1/complete`: the outcome, under the fence.
pub(crate) async fn complete(
    State(app): State<Arc<App>>,
    Api(req): Api<CompleteRequest>,
) -> Answer {
    let key = app.record_key(&req.key, "key")?;
    check_integer(req.fence, "fence")?;
    let outcome = Outcome::new(
        check_status(req.status, "status")?,
        body_bytes(&req.body, &req.body_base64)?,
    );
    finish(&app, key, req.fence, Ending::Completed, outcome).await
}

/// `POST /v1/fail`: a failure, retryable or not, under the fence.
pub(crate) async fn fail(State(app): State<Arc<App>>, Api(req): Api<FailRequest>) -> Answer {
    let key = app.record_key(&req.key, "key")?;
    check_integer(req.fence, "fence")?;
    if let Some(error) = &req.error {
        check_text(error, "error")?;
    }
    let outcome = Outcome {
        status: check_status(req.status, "status")?,
        body: body_bytes(&req.body, &req.body_base64)?,
        error: Some(
            req.error
                .unwrap_or_else(|| format!("failed with status {}", req.status)),
        ),
    };
    let ending = Ending::Failed {
        retryable: req.retryable,
    };
    finish(&app, key, req.fence, ending, outcome).await
}

/// A write of the end under the fence. The same end sent again under the
/// same fence (a retry after a lost answer) answers as the first did (the
/// library recognises its own echo); another end under that fence is a
/// `409` naming what is stored and what was sent.
async fn finish(app: &App, key: RecordKey, fence: u64, ending: Ending, outcome: Outcome) -> Answer {
    let sent = (outcome.status, outcome.body.len());
    match app
        .engine()
        .finish_fenced(&key, fence, ending, outcome)
        .await
    {
        Ok(()) => {}
        Err(EngineError::Fenced(StoreError::NotInProgress {
            fence: current,
            state,
            ..
        })) if current == fence => {
            return Err(ended_otherwise(app, &key, fence, state, ending, sent).await);
        }
        Err(e) => return Err(engine_error(e)),
    }
    Ok(Json(json!({
        "key": key.digest.to_hex(),
        "fence": fence,
        "state": ending.state().as_str(),
    }))
    .into_response())
}

/// The refusal of an end under a fence whose record already ended
/// otherwise under that same fence: both ends named, nothing changed.
async fn ended_otherwise(
    app: &App,
    key: &RecordKey,
    fence: u64,
    state: RecordState,
    ending: Ending,
    (status, body_len): (i32, usize),
) -> ApiError {
    let stored = match app.engine().store().records().get(key).await {
        Ok(Some(view)) => view.record.outcome.map(|o| (o.status, o.body.len())),
        _ => None,
    };
    let stored = match stored {
        Some((s, n)) => format!("{} with status {s} and a {n}-byte body", state.as_str()),
        None => state.as_str().to_string(),
    };
    ApiError(
        Problem::new(
            StatusCode::CONFLICT,
            "not-in-progress",
            "The record is no longer in progress",
            format!(
                "the record already ended under fence {fence}: {stored}; this call sends {} with status {status} and a {body_len}-byte body. A final record is never overwritten: this write changed nothing (the same end sent again would be answered 200)",
                ending.state().as_str()
            ),
        )
        .with("fence", fence)
        .with("state", state.as_str()),
    )
}

/// `POST /v1/heartbeat`: the lease extended, under the fence.
pub(crate) async fn heartbeat(
    State(app): State<Arc<App>>,
    Api(req): Api<HeartbeatRequest>,
) -> Answer {
    let key = app.record_key(&req.key, "key")?;
    check_integer(req.fence, "fence")?;
    let (low, high) = LEASE_BOUNDS_MS;
    if !(low..=high).contains(&req.lease_ms) {
        return Err(invalid(
            Some("lease_ms"),
            format!(
                "`lease_ms` is {}; a lease is from {low} ms (1 s) to {high} ms (24 h)",
                req.lease_ms
            ),
        ));
    }
    let until = app
        .engine()
        .heartbeat_fenced(&key, req.fence, Duration::from_millis(req.lease_ms))
        .await
        .map_err(engine_error)?;
    Ok(Json(json!({
        "key": key.digest.to_hex(),
        "fence": req.fence,
        "lease_until_ms": until,
    }))
    .into_response())
}

/// `POST /v1/resolve`: a person's settlement of a record waiting for
/// review, conditional on the fence they saw, logged with who and why; or,
/// with `amend`, a person's amendment of a release or rejection that was
/// wrong (fenced the same way, both decisions kept in the log).
pub(crate) async fn resolve(State(app): State<Arc<App>>, Api(req): Api<ResolveRequest>) -> Answer {
    let key = app.record_key(&req.key, "key")?;
    check_integer(req.fence, "fence")?;
    check_text(&req.reason, "reason")?;
    check_text(&req.by, "by")?;
    let body = body_bytes(&req.body, &req.body_base64)?;
    if let Some(status) = req.status {
        check_status(status, "status")?;
    }
    let resolution = match req.resolution {
        ResolutionKind::Completed => {
            Resolution::Completed(Outcome::new(req.status.unwrap_or(0), body))
        }
        _ if !body.is_empty() => {
            return Err(invalid(
                Some("body"),
                "only a `completed` resolution stores a body",
            ));
        }
        ResolutionKind::Release if req.status.is_some() => {
            return Err(invalid(
                Some("status"),
                "a `release` stores no status: the next claim executes again",
            ));
        }
        ResolutionKind::Release => Resolution::Release,
        ResolutionKind::Reject => Resolution::Reject {
            status: req.status.unwrap_or(1),
        },
    };
    let mut holder = Holder::this_process();
    holder.trigger = Some("manual".into());
    let request = StoreResolve {
        key: key.clone(),
        observed_fence: req.fence,
        resolution,
        by: req.by.clone(),
        reason: req.reason.clone(),
        holder,
    };
    let store = app.engine().store();
    let view = if req.amend {
        forensics::review::amend(store, request).await
    } else {
        forensics::review::resolve(store, request).await
    }
    .map_err(store_error)?;
    Ok(Json(json!({
        "key": key.digest.to_hex(),
        "state": view.record.state.as_str(),
        "fence": view.record.fence,
        "by": req.by,
        "reason": req.reason,
        "amended": req.amend,
        "operation": forensics::ShownOperation::of_record(&view.record),
    }))
    .into_response())
}

/// How many duplicates' operations a report looks up (one store read each).
const REPORT_OPERATIONS: usize = 1_000;

/// `POST /v1/report`: why it ran twice, in this policy's namespace: the
/// report model ([`read_report`]) whose analysis `idem report --json`
/// prints.
pub(crate) async fn report(State(app): State<Arc<App>>, Api(req): Api<ReportRequest>) -> Answer {
    let key = match &req.key {
        Some(text) => Some(app.record_key(text, "key")?),
        None => None,
    };
    if let Some(run) = &req.run_id {
        check_text(run, "run_id")?;
    }
    for (value, member) in [(req.since_ms, "since_ms"), (req.until_ms, "until_ms")] {
        if let Some(v) = value {
            check_integer(v, member)?;
        }
    }
    let namespace = app.engine().policy().info().namespace.clone();
    // Answers to duplicates reach the log in batches behind the caller's
    // back: a report must see every answer this server gave before it
    // was asked (a client that got a replay, then asks, finds it).
    app.engine().flush_log().await;
    let scope = ReportScope {
        namespace: Some(namespace.clone()),
        key,
        since_ms: req.since_ms,
        until_ms: req.until_ms,
        run_id: req.run_id.clone(),
        ..ReportScope::default()
    };
    let found = read_report(app.engine().store(), &scope, REPORT_OPERATIONS)
        .await
        .map_err(store_error)?;
    let mut out = serde_json::to_value(found.analysis).expect("an analysis serialises");
    out["namespace"] = json!(namespace);
    out["since_ms"] = json!(req.since_ms);
    out["until_ms"] = json!(req.until_ms);
    Ok(Json(out).into_response())
}

/// Any path the API does not have.
pub(crate) async fn not_found(uri: http::Uri) -> ApiError {
    ApiError(Problem::new(
        StatusCode::NOT_FOUND,
        "no-such-route",
        "The API has no such route",
        format!(
            "no route `{}`: the routes are {}",
            uri.path().chars().take(200).collect::<String>(),
            crate::ROUTES.map(|(m, p)| format!("{m} {p}")).join(", ")
        ),
    ))
}

/// A route's path with another method.
pub(crate) async fn method_not_allowed(method: http::Method, uri: http::Uri) -> Response {
    let mut response = ApiError(Problem::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method-not-allowed",
        "The route takes another method",
        format!("`{}` takes POST, not {method}", uri.path()),
    ))
    .into_response();
    response
        .headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static("POST"));
    response
}
