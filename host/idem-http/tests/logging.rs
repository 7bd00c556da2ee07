//! What the layer and the engine say in a service's log at info level, as
//! a `tracing` subscriber formats it: a request's span, a fresh execution's
//! end, a replay, a refusal and a deposed holder's refused end; free text
//! escaped.

use std::io::Write;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::routing::post;
use idem::engine::Begin;
use idem::store::{Ending, Outcome};
use idem_http::IdempotencyLayer;
use tower::ServiceExt;
use tracing_subscriber::fmt::MakeWriter;

/// The formatted log, kept.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }

    /// The lines that carry `event` as their message.
    fn lines_of(&self, event: &str) -> Vec<String> {
        self.text()
            .lines()
            .filter(|l| l.split_whitespace().any(|w| w == event))
            .map(str::to_string)
            .collect()
    }
}

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Captured {
    type Writer = Captured;

    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

fn request(key: &str, body: &str) -> Request<Body> {
    Request::post("/charges")
        .header("idempotency-key", key)
        .body(Body::from(body.to_string()))
        .unwrap()
}

#[tokio::test]
async fn an_info_log_says_what_ran_what_was_replayed_refused_and_fenced() {
    let log = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(log.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::INFO)
        .finish();
    // The test's runtime is this thread: everything it polls logs here.
    let _default = tracing::subscriber::set_default(subscriber);

    let engine = idem_tests::engine_on("http-idempotency-key", "memory:").await;
    let app = Router::new()
        .route(
            "/charges",
            post(|| async { (StatusCode::CREATED, "charged") }),
        )
        .layer(IdempotencyLayer::new(engine.clone()).tenant("shop"));
    let send = |r| app.clone().oneshot(r);
    let fresh = send(request("k-1", "100 EUR")).await.unwrap();
    assert_eq!(fresh.status(), StatusCode::CREATED);
    let finished = log.lines_of("idem.finished");
    assert_eq!(finished.len(), 1, "{}", log.text());
    let line = &finished[0];
    assert!(
        line.contains("idem.request{"),
        "in the request's span: {line}"
    );
    assert!(line.contains("method=POST") && line.contains("path=/charges"));
    assert!(line.contains("idempotency_key=\"k-1\""), "{line}");
    assert!(line.contains("ending=\"completed\"") || line.contains("ending=completed"));
    assert!(line.contains("fence=1"), "{line}");
    assert!(
        line.contains("key=http/"),
        "the derived key, by namespace: {line}"
    );

    // The client's key as sent (quoted): recorded escaped, never raw.
    let replay = send(request("\"k-1\"", "100 EUR")).await.unwrap();
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    let replayed = log.lines_of("idem.replayed");
    assert_eq!(replayed.len(), 1, "{}", log.text());
    assert!(
        replayed[0].contains(r#"idempotency_key="\"k-1\"""#),
        "{}",
        replayed[0]
    );
    assert!(replayed[0].contains("status=201"), "{}", replayed[0]);

    let reused = send(request("k-1", "999 EUR")).await.unwrap();
    assert_eq!(reused.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let refused = log.lines_of("idem.refused");
    assert_eq!(refused.len(), 1, "{}", log.text());
    assert!(refused[0].contains("answer=\"conflict\"") || refused[0].contains("answer=conflict"));
    assert!(refused[0].contains("status=422"), "{}", refused[0]);
    assert!(
        refused[0].contains("reason=\""),
        "a reason, quoted: {}",
        refused[0]
    );

    // A holder deposed: its end is refused by the fence, and said at warn.
    let op = idem::core::Operation::builder("http-request", "shop")
        .text("idempotency_key", "k-2")
        .text("method", "POST")
        .text("path", "/charges")
        .build()
        .unwrap();
    let Begin::Execute(execution) = engine.begin(&op).await.unwrap() else {
        panic!("a fresh key is executed");
    };
    let key = execution.key().clone();
    let fence = execution.fence();
    let refused_end = engine
        .finish_fenced(&key, fence + 1, Ending::Completed, Outcome::default())
        .await;
    assert!(refused_end.is_err(), "a fence the record never had");
    let fenced = log.lines_of("idem.fenced");
    assert_eq!(fenced.len(), 1, "{}", log.text());
    assert!(fenced[0].contains("WARN"), "{}", fenced[0]);
    assert!(
        fenced[0].contains(&format!("fence={}", fence + 1)),
        "{}",
        fenced[0]
    );
    // Nothing below info, and nothing idem keeps at debug.
    assert!(!log.text().contains("idem.begin{"), "{}", log.text());
}
