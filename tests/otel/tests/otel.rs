//! The `otel` feature end to end: a real `idem` binary built with it
//! exports its spans over OTLP/HTTP (protobuf) to a receiver this test
//! starts, which decodes them as a collector would
//! (`ExportTraceServiceRequest`). `idem exec` runs an operation and its
//! duplicate; `idem serve` answers a begin and a complete carrying a
//! client's W3C `traceparent`, and its spans continue the client's trace.
//!
//! The binary is the one built beside this test (`target/<profile>/idem`),
//! which must have the feature: `cargo build -p idem-cli --features otel`,
//! then `cargo test -p idem-otel-tests --features otel` (as `.ci/run`
//! does). A binary without it exports nothing, and the test says so.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex};

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, any_value};
use prost::Message;

#[path = "otel/https.rs"]
mod https;

const OP: &str = r#"{"kind":"charge","tenant":"acme","fields":{"customer":"c1","billing_period":"2026-11","invoice_id":"R-189","amount":"100","currency":"EUR"}}"#;

/// One span as the receiver got it.
#[derive(Debug, Clone)]
struct Got {
    name: String,
    kind: i32,
    trace_id: String,
    span_id: String,
    parent: String,
    attributes: HashMap<String, String>,
    service: String,
}

impl Got {
    fn attr(&self, name: &str) -> &str {
        self.attributes
            .get(name)
            .unwrap_or_else(|| panic!("{} has no {name}: {:?}", self.name, self.attributes))
    }
}

/// An OTLP/HTTP receiver on a port of its own, keeping every span sent to
/// `/v1/traces`.
struct Receiver {
    endpoint: String,
    spans: Arc<Mutex<Vec<Got>>>,
    _runtime: tokio::runtime::Runtime,
}

impl Receiver {
    fn start() -> Receiver {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let spans = Arc::new(Mutex::new(Vec::new()));
        let kept = spans.clone();
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        let app = axum::Router::new().route(
            "/v1/traces",
            axum::routing::post(move |body: axum::body::Bytes| {
                let kept = kept.clone();
                async move {
                    let request = ExportTraceServiceRequest::decode(body).expect("OTLP protobuf");
                    kept.lock().unwrap().extend(flatten(request));
                    // An empty ExportTraceServiceResponse: all accepted.
                    (
                        [("content-type", "application/x-protobuf")],
                        Vec::<u8>::new(),
                    )
                }
            }),
        );
        runtime.spawn(async move { axum::serve(listener, app).await.unwrap() });
        Receiver {
            endpoint,
            spans,
            _runtime: runtime,
        }
    }

    fn spans(&self) -> Vec<Got> {
        self.spans.lock().unwrap().clone()
    }
}

fn flatten(request: ExportTraceServiceRequest) -> Vec<Got> {
    let mut out = Vec::new();
    for resource_spans in request.resource_spans {
        let resource = resource_spans.resource.unwrap_or_default();
        let service = resource
            .attributes
            .iter()
            .find(|kv| kv.key == "service.name")
            .map(|kv| text(kv.value.as_ref()))
            .unwrap_or_default();
        for scope in resource_spans.scope_spans {
            for span in scope.spans {
                out.push(Got {
                    name: span.name,
                    kind: span.kind,
                    trace_id: hex(&span.trace_id),
                    span_id: hex(&span.span_id),
                    parent: hex(&span.parent_span_id),
                    attributes: span
                        .attributes
                        .iter()
                        .map(|kv| (kv.key.clone(), text(kv.value.as_ref())))
                        .collect(),
                    service: service.clone(),
                });
            }
        }
    }
    out
}

fn text(value: Option<&AnyValue>) -> String {
    match value.and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        Some(any_value::Value::DoubleValue(d)) => d.to_string(),
        other => format!("{other:?}"),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn named<'a>(spans: &'a [Got], name: &str) -> Vec<&'a Got> {
    spans.iter().filter(|s| s.name == name).collect()
}

fn child_of<'a>(spans: &'a [Got], parent: &Got, name: &str) -> &'a Got {
    spans
        .iter()
        .find(|s| s.name == name && s.parent == parent.span_id && s.trace_id == parent.trace_id)
        .unwrap_or_else(|| panic!("no {name} under {} in {spans:#?}", parent.name))
}

/// The `idem` binary built beside this test binary
/// (`target/<profile>/deps/otel-<hash>` → `target/<profile>/idem`).
fn idem_bin() -> PathBuf {
    let bin = std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.parent()?.join("idem")))
        .expect("the target directory's layout");
    assert!(
        bin.is_file(),
        "{} is missing: `cargo build -p idem-cli --features otel` first",
        bin.display()
    );
    bin
}

/// What the receiver holds, which is never nothing after a command ended
/// (its spans are flushed before it exits) unless the binary was built
/// without the feature.
fn received(receiver: &Receiver) -> Vec<Got> {
    let spans = receiver.spans();
    assert!(
        !spans.is_empty(),
        "no span reached the receiver: was {} built with `--features otel` \
         (`cargo build -p idem-cli --features otel`)?",
        idem_bin().display()
    );
    spans
}

fn idem(dir: &Path, endpoint: &str) -> Command {
    let mut c = Command::new(idem_bin());
    c.env("IDEM_CACHE_DIR", dir.join("cache"))
        .env_remove("IDEM_LOG")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .env_remove("OTEL_EXPORTER_OTLP_CERTIFICATE")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE")
        .env_remove("OTEL_SERVICE_NAME")
        .env_remove("OTEL_RESOURCE_ATTRIBUTES")
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

fn exec(dir: &Path, endpoint: &str) -> Command {
    let policy = idem_tests::policy_path("billing-charge");
    let op = dir.join("op.json");
    std::fs::write(&op, OP).unwrap();
    let mut c = idem(dir, endpoint);
    c.arg("exec")
        .arg("--policy")
        .arg(policy)
        .arg("--store")
        .arg(format!("sqlite:{}", dir.join("idem.db").display()))
        .arg("--op")
        .arg(op)
        .args(["--run-id", "nightly-2026-12-06", "--", "echo", "receipt 42"]);
    c
}

fn succeeded(out: Output) -> Output {
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

#[test]
fn exec_exports_each_operation_with_its_claim_effect_and_end() {
    let receiver = Receiver::start();
    let dir = tempfile::tempdir().unwrap();
    succeeded(exec(dir.path(), &receiver.endpoint).output().unwrap());
    // The spans are flushed before the process exits: all are here.
    let first = received(&receiver);
    let ops = named(&first, "idem.operation");
    assert_eq!(ops.len(), 1, "{first:#?}");
    let op = ops[0];
    assert_eq!(op.service, "idem", "the default service name");
    assert_eq!(op.attr("idem.namespace"), "billing");
    assert_eq!(op.attr("idem.key").len(), 64);
    assert_eq!(op.attr("idem.run_id"), "nightly-2026-12-06");
    assert_eq!(op.attr("process.exit.code"), "0");
    assert_eq!(op.parent, "", "an operation is its own trace's root");
    let derive = child_of(&first, op, "idem.derive");
    assert_eq!(derive.attr("idem.namespace"), "billing");
    let claim = child_of(&first, op, "idem.claim_batch");
    assert_eq!(claim.attr("db.system.name"), "sqlite");
    assert_eq!(claim.attr("db.operation.name"), "claim");
    let begin = child_of(&first, op, "idem.begin");
    assert_eq!(begin.attr("idem.answer"), "execute");
    assert_eq!(begin.attr("idem.key"), op.attr("idem.key"));
    assert_eq!(begin.attr("idem.fence"), "1");
    assert_eq!(begin.attr("idem.attempt"), "1");
    assert_eq!(begin.attr("idem.run_id"), "nightly-2026-12-06");
    assert!(begin.attr("idem.holder").contains(':'), "host:pid");
    assert_eq!(begin.attr("db.system.name"), "sqlite");
    assert_eq!(begin.attr("db.operation.name"), "claim");
    let effect = child_of(&first, op, "idem.effect");
    assert_eq!(effect.attr("idem.effect.outcome"), "completed");
    assert_eq!(effect.attr("idem.fence"), "1");
    let end = child_of(&first, op, "idem.finish_batch");
    assert_eq!(end.attr("db.operation.name"), "finish");
    assert_eq!(end.attr("db.operation.batch.size"), "1");

    // The duplicate: replayed, under a service name of the operator's.
    let mut again = exec(dir.path(), &receiver.endpoint);
    again.env("OTEL_SERVICE_NAME", "billing-job");
    succeeded(again.output().unwrap());
    let all = receiver.spans();
    let second: Vec<Got> = all[first.len()..].to_vec();
    let op = named(&second, "idem.operation")[0];
    assert_eq!(op.service, "billing-job");
    let begin = child_of(&second, op, "idem.begin");
    assert_eq!(begin.attr("idem.answer"), "replay");
    assert!(named(&second, "idem.effect").is_empty(), "{second:#?}");
    assert_ne!(op.trace_id, named(&first, "idem.operation")[0].trace_id);
}

#[test]
fn nothing_is_exported_without_an_endpoint() {
    let receiver = Receiver::start();
    let dir = tempfile::tempdir().unwrap();
    let mut plain = exec(dir.path(), "");
    // The receiver is where a default endpoint would send, were one used.
    plain.env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "");
    succeeded(plain.output().unwrap());
    assert!(receiver.spans().is_empty());
}

/// One HTTP/1.1 request on its own connection; the status and body.
fn post(addr: &str, path: &str, traceparent: &str, body: &serde_json::Value) -> (u16, String) {
    let body = body.to_string();
    let mut stream = TcpStream::connect(addr).unwrap();
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/json\r\ntraceparent: {traceparent}\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut raw = String::new();
    stream.read_to_string(&mut raw).unwrap();
    let status = raw[9..12].parse().unwrap();
    let body = raw.split_once("\r\n\r\n").map(|(_, b)| b.to_string());
    (status, body.unwrap_or_default())
}

#[test]
fn serve_continues_the_client_s_trace() {
    let receiver = Receiver::start();
    let dir = tempfile::tempdir().unwrap();
    let mut serve = idem(dir.path(), &receiver.endpoint);
    serve
        .arg("serve")
        .arg("--no-cache")
        .arg("--policy")
        .arg(idem_tests::policy_path("billing-charge"))
        .arg("--store")
        .arg(format!("sqlite:{}", dir.path().join("idem.db").display()))
        .args(["--listen", "127.0.0.1:0"])
        .stderr(Stdio::inherit());
    let mut child = serve.spawn().unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .trim()
        .strip_prefix("idem serve: listening on http://")
        .unwrap_or_else(|| panic!("{line:?}"))
        .to_string();

    // The client's trace, and its two spans that call the sidecar.
    let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let (client_begin, client_complete) = ("00f067aa0ba902b7", "00f067aa0ba902b8");
    let op: serde_json::Value = serde_json::from_str(OP).unwrap();
    let (status, begun) = post(
        &addr,
        "/v1/begin",
        &format!("00-{trace}-{client_begin}-01"),
        &serde_json::json!({"operation": op, "caller": "billing-worker-7"}),
    );
    assert_eq!(status, 200, "{begun}");
    let begun: serde_json::Value = serde_json::from_str(&begun).unwrap();
    let (status, done) = post(
        &addr,
        "/v1/complete",
        &format!("00-{trace}-{client_complete}-01"),
        &serde_json::json!({"key": begun["key"], "fence": begun["fence"], "status": 0, "body": "receipt 42"}),
    );
    assert_eq!(status, 200, "{done}");
    // SIGTERM: serve drains, and flushes its spans as it exits.
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    assert!(child.wait().unwrap().success());

    let spans = received(&receiver);
    let request = named(&spans, "POST /v1/begin");
    assert_eq!(request.len(), 1, "{spans:#?}");
    let request = request[0];
    assert_eq!(request.trace_id, trace, "the client's trace continues");
    assert_eq!(request.parent, client_begin);
    assert_eq!(request.kind, 2, "SPAN_KIND_SERVER");
    assert_eq!(request.attr("http.request.method"), "POST");
    assert_eq!(request.attr("http.route"), "/v1/begin");
    assert_eq!(request.attr("http.response.status_code"), "200");
    let begin = child_of(&spans, request, "idem.begin");
    assert_eq!(begin.attr("idem.answer"), "execute");
    assert_eq!(begin.attr("idem.holder"), "billing-worker-7");
    assert_eq!(begin.attr("idem.key"), begun["key"].as_str().unwrap());
    child_of(&spans, request, "idem.derive");

    let request = named(&spans, "POST /v1/complete")[0];
    assert_eq!(
        (request.trace_id.as_str(), request.parent.as_str()),
        (trace, client_complete)
    );
    let finish = child_of(&spans, request, "idem.finish");
    assert_eq!(finish.attr("idem.ending"), "completed");
    assert_eq!(finish.attr("idem.result"), "ok");
    assert_eq!(finish.attr("db.operation.name"), "complete");
    assert_eq!(finish.attr("db.system.name"), "sqlite");
}
