//! The example service driven over real HTTP, as separate processes: the
//! service, its fake provider and the nightly job are the example binary,
//! started as children; the provider's ledger says what really happened.
//! Each test runs on SQLite and, with `IDEM_TEST_POSTGRES_URL`, PostgreSQL.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_payment-service");

/// A child process of the example binary, killed when dropped.
struct Process {
    child: Child,
    url: String,
}

impl Process {
    /// Starts `payment-service ARGS` and waits for the line announcing
    /// where it listens.
    fn start(args: &[&str]) -> Process {
        let mut child = Command::new(BIN)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("the example binary starts");
        let stdout = child.stdout.take().expect("piped stdout");
        let mut lines = BufReader::new(stdout).lines();
        let url = loop {
            let line = lines
                .next()
                .unwrap_or_else(|| panic!("payment-service {args:?} exited before listening"))
                .expect("a line of stdout");
            if let Some(url) = line.split("listening on ").nth(1) {
                break url.trim().to_string();
            }
        };
        Process { child, url }
    }

    /// SIGKILL: no graceful anything.
    fn kill(&mut self) {
        self.child.kill().expect("kill the child");
        self.child.wait().expect("reap the child");
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The store URLs a test runs on: a SQLite file in `dir`, and PostgreSQL in
/// a fresh schema when the environment names a database.
fn stores(test: &str, dir: &std::path::Path) -> Vec<String> {
    let mut urls = vec![format!("sqlite:{}", dir.join("idem.db").display())];
    if let Some(url) = idem_tests::postgres_url(test) {
        let schema = idem_store_conformance::fresh_schema();
        let sep = if url.contains('?') { '&' } else { '?' };
        urls.push(format!("{url}{sep}idem_schema={schema}&idem_pool_size=4"));
    }
    urls
}

fn policy(name: &str) -> String {
    idem_tests::policy_path(name).display().to_string()
}

struct Answer {
    status: u16,
    replayed: bool,
    body: Value,
}

impl Answer {
    /// The problem type's slug, for a problem answer.
    fn problem(&self) -> &str {
        self.body["type"]
            .as_str()
            .and_then(|t| t.strip_prefix(idem_http::problem::TYPE_PREFIX))
            .unwrap_or("")
    }
}

fn client() -> Client<HttpConnector, Full<Bytes>> {
    Client::builder(TokioExecutor::new()).build_http()
}

async fn post_charge(
    client: &Client<HttpConnector, Full<Bytes>>,
    service: &str,
    key: &str,
) -> Result<Answer, String> {
    let body = r#"{"customer":"cus_42","amount":"19.99","currency":"EUR"}"#;
    let request = http::Request::post(format!("{service}/charges"))
        .header("content-type", "application/json")
        .header("idempotency-key", key)
        .body(Full::new(Bytes::from(body)))
        .unwrap();
    let response = client.request(request).await.map_err(|e| e.to_string())?;
    let status = response.status().as_u16();
    let replayed = response
        .headers()
        .get("idempotent-replayed")
        .is_some_and(|v| v == "true");
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?;
    let body = serde_json::from_slice(&body.to_bytes()).unwrap_or(Value::Null);
    Ok(Answer {
        status,
        replayed,
        body,
    })
}

/// The provider's ledger: every request it got and every charge it made.
async fn ledger(provider: &str) -> Value {
    let request = http::Request::get(format!("{provider}/v1/charges"))
        .body(Full::new(Bytes::new()))
        .unwrap();
    let response = client()
        .request(request)
        .await
        .expect("the provider answers");
    let body = response.into_body().collect().await.unwrap().to_bytes();
    serde_json::from_slice(&body).unwrap()
}

async fn fifty_identical_requests_charge_once(store: &str) {
    let provider = Process::start(&["provider", "--listen", "127.0.0.1:0", "--delay", "200ms"]);
    let service = Process::start(&[
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--store",
        store,
        "--policy",
        &policy("http-idempotency-key"),
        "--provider",
        &provider.url,
    ]);
    let client = client();
    let requests = (0..50).map(|_| {
        let (client, url) = (client.clone(), service.url.clone());
        tokio::spawn(async move { post_charge(&client, &url, "order-7-payment").await })
    });
    let mut answers = Vec::new();
    for request in requests {
        answers.push(request.await.unwrap().expect("every request is answered"));
    }
    let fresh = answers
        .iter()
        .filter(|a| a.status == 201 && !a.replayed)
        .count();
    let replays = answers
        .iter()
        .filter(|a| a.status == 201 && a.replayed)
        .count();
    let in_flight = answers
        .iter()
        .filter(|a| a.status == 409 && a.problem() == "request-in-flight")
        .count();
    assert_eq!((fresh, replays + in_flight), (1, 49), "{store}");
    let charge_ids: Vec<&Value> = answers
        .iter()
        .filter(|a| a.status == 201)
        .map(|a| &a.body["id"])
        .collect();
    assert!(
        charge_ids.iter().all(|id| *id == charge_ids[0]),
        "every replay names the one charge"
    );
    let ledger = ledger(&provider.url).await;
    assert_eq!(ledger["requests"], 1, "{ledger}");
    assert_eq!(ledger["charges"].as_array().unwrap().len(), 1, "{ledger}");
}

#[tokio::test(flavor = "multi_thread")]
async fn fifty_concurrent_identical_requests_make_one_charge() {
    let dir = tempfile::tempdir().unwrap();
    for store in stores(
        "fifty_concurrent_identical_requests_make_one_charge",
        dir.path(),
    ) {
        fifty_identical_requests_charge_once(&store).await;
    }
}

async fn retry_after_a_kill_never_charges_twice(store: &str) {
    // The provider charges at once and answers 5 s later: the service is
    // killed while the charge is in flight, its outcome never recorded.
    let provider = Process::start(&["provider", "--listen", "127.0.0.1:0", "--delay", "5s"]);
    let serve = |provider: &str| {
        Process::start(&[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--store",
            store,
            "--lease",
            "1s",
            "--policy",
            &policy("http-idempotency-key"),
            "--provider",
            provider,
        ])
    };
    let mut service = serve(&provider.url);
    let client = client();
    let first = tokio::spawn({
        let (client, url) = (client.clone(), service.url.clone());
        async move { post_charge(&client, &url, "order-8-payment").await }
    });
    while ledger(&provider.url).await["in_flight"] != 1 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    service.kill();
    assert!(
        first.await.unwrap().is_err(),
        "the killed service never answered"
    );
    let service = serve(&provider.url);
    // Until the dead holder's lease ends the retry is told to come back;
    // then the policy decides.
    let answer = loop {
        let answer = post_charge(&client, &service.url, "order-8-payment")
            .await
            .unwrap();
        if !(answer.status == 409 && answer.problem() == "request-in-flight") {
            break answer;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let replay = answer.status == 201 && answer.replayed;
    let review = answer.status == 409 && answer.problem() == "needs-review";
    assert!(
        replay || review,
        "{store}: {} {}",
        answer.status,
        answer.body
    );
    let ledger = ledger(&provider.url).await;
    assert_eq!(ledger["requests"], 1, "{ledger}");
    assert_eq!(ledger["charges"].as_array().unwrap().len(), 1, "{ledger}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_retry_after_the_service_is_killed_mid_request_never_charges_twice() {
    let dir = tempfile::tempdir().unwrap();
    let test = "a_retry_after_the_service_is_killed_mid_request_never_charges_twice";
    for store in stores(test, dir.path()) {
        retry_after_a_kill_never_charges_twice(&store).await;
    }
}

/// Runs the nightly job to its end and returns its summary.
fn nightly(store: &str, provider: &str, trigger: &str) -> Child {
    let ops = idem_tests::workspace_root().join("examples/nightly-billing/ops.jsonl");
    Command::new(BIN)
        .args([
            "nightly",
            "--store",
            store,
            "--policy",
            &policy("billing-charge"),
        ])
        .args(["--ops", &ops.display().to_string(), "--provider", provider])
        .args(["--run-id", "nightly-2026-11-30", "--trigger", trigger])
        .stdout(Stdio::piped())
        .spawn()
        .expect("the nightly job starts")
}

fn summary(child: Child) -> Value {
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "the nightly job failed");
    serde_json::from_slice(&out.stdout).unwrap()
}

async fn nightly_twice_at_once_and_by_hand(store: &str) {
    let provider = Process::start(&["provider", "--listen", "127.0.0.1:0", "--delay", "20ms"]);
    let (a, b) = (
        nightly(store, &provider.url, "scheduled"),
        nightly(store, &provider.url, "scheduled"),
    );
    let (a, b) = (summary(a), summary(b));
    let executed = a["executed"].as_u64().unwrap() + b["executed"].as_u64().unwrap();
    assert_eq!(executed, 40, "{store}: {a} {b}");
    let by_hand = summary(nightly(store, &provider.url, "manual"));
    assert_eq!(
        (by_hand["executed"].as_u64(), by_hand["replayed"].as_u64()),
        (Some(0), Some(40)),
        "{by_hand}"
    );
    let ledger = ledger(&provider.url).await;
    assert_eq!(
        ledger["requests"], 40,
        "the provider was never asked twice: {ledger}"
    );
    let charges = ledger["charges"].as_array().unwrap();
    let mut invoices: Vec<&str> = charges
        .iter()
        .map(|c| c["request"]["invoice_id"].as_str().unwrap())
        .collect();
    invoices.sort();
    invoices.dedup();
    assert_eq!((charges.len(), invoices.len()), (40, 40));
}

#[tokio::test(flavor = "multi_thread")]
async fn the_nightly_job_twice_at_once_and_again_by_hand_charges_each_invoice_once() {
    let dir = tempfile::tempdir().unwrap();
    let test = "the_nightly_job_twice_at_once_and_again_by_hand_charges_each_invoice_once";
    for store in stores(test, dir.path()) {
        nightly_twice_at_once_and_by_hand(&store).await;
    }
}

/// Calls the provider as a holder does, with `key` and `fence`.
async fn provider_charge(provider: &str, key: &str, fence: &str) -> Answer {
    let request = http::Request::post(format!("{provider}/v1/charges"))
        .header("content-type", "application/json")
        .header("idempotency-key", key)
        .header("idem-fence", fence)
        .body(Full::new(Bytes::from(r#"{"amount":"5.00"}"#)))
        .unwrap();
    let response = client().request(request).await.unwrap();
    let status = response.status().as_u16();
    let replayed = response
        .headers()
        .get("idempotent-replayed")
        .is_some_and(|v| v == "true");
    let body = response.into_body().collect().await.unwrap().to_bytes();
    Answer {
        status,
        replayed,
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
    }
}

/// The provider's gate, as a take-over meets it: the first holder's call
/// charges, its successor's (a higher fence) gets that charge replayed,
/// and the first holder's late retry is refused — with the gate's entries
/// in memory and in a SQLite file.
#[tokio::test(flavor = "multi_thread")]
async fn the_providers_gate_charges_once_replays_a_successor_and_refuses_a_deposed_holder() {
    let dir = tempfile::tempdir().unwrap();
    let sqlite = format!("sqlite:{}", dir.path().join("gate.db").display());
    for gate_store in ["memory:", sqlite.as_str()] {
        let provider = Process::start(&[
            "provider",
            "--listen",
            "127.0.0.1:0",
            "--gate-store",
            gate_store,
        ]);
        let first = provider_charge(&provider.url, "k-1", "1").await;
        assert_eq!((first.status, first.replayed), (200, false), "{gate_store}");
        let successor = provider_charge(&provider.url, "k-1", "2").await;
        assert_eq!((successor.status, successor.replayed), (200, true));
        assert_eq!(successor.body["charge"], first.body["charge"]);
        let late = provider_charge(&provider.url, "k-1", "1").await;
        assert_eq!((late.status, late.problem()), (409, "stale-fence"));
        assert_eq!(late.body["highest_fence"], 2);
        let ledger = ledger(&provider.url).await;
        assert_eq!(ledger["requests"], 3, "{ledger}");
        assert_eq!(ledger["charges"].as_array().unwrap().len(), 1, "{ledger}");
    }
}
