//! What an operator watches and settles through `idem serve`: the metrics
//! endpoint (`--metrics`), checked by Prometheus's own `promtool`, and the
//! review console (`--console`), clicked through in a real headless
//! Chromium driven by Debian's chromedriver (WebDriver over HTTP): sign in
//! with the token, settle a lapsed charge, and find the store changed —
//! plus the refusals a console must make (no session, a forged form, a
//! stale fence).

use std::io::Write;
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use idem_store::{AttemptEvent, AttemptFilter, RecordState};
use idem_tests::{tool_available, workspace_root};
use serde_json::{Value, json};

use crate::serve::{Reply, Server, TestStore, op, request};

pub(crate) const TOKEN: &str = "console-test-token";

fn get(server: &Server, path: &str, headers: &[(String, String)]) -> Reply {
    request(&server.addr, "GET", path, headers, b"")
}

fn bearer() -> Vec<(String, String)> {
    vec![("Authorization".into(), format!("Bearer {TOKEN}"))]
}

// `GET /metrics` behind the token, in a text `promtool check metrics`
// accepts, with the names the book documents.
#[test]
fn the_metrics_endpoint_is_behind_the_token_and_promtool_accepts_it() {
    if !tool_available("operator_console::metrics", "promtool") {
        return;
    }
    let store = TestStore::sqlite();
    let server = Server::start(&store.url, &["--metrics"], &[("IDEM_SERVE_TOKEN", TOKEN)]);
    for invoice in ["m1", "m2"] {
        let begun = server.ok("/v1/begin", &json!({"operation": op(invoice, "100")}));
        assert_eq!(begun["answer"], "execute", "{begun}");
        server.ok(
            "/v1/complete",
            &json!({"key": begun["key"], "fence": begun["fence"], "status": 0, "body": "ok"}),
        );
    }
    let replay = server.ok("/v1/begin", &json!({"operation": op("m1", "100")}));
    assert_eq!(replay["answer"], "replay");

    assert_eq!(
        get(&server, "/metrics", &[]).status,
        401,
        "no token, no metrics"
    );
    let reply = get(&server, "/metrics", &bearer());
    assert_eq!(reply.status, 200);
    assert!(
        reply
            .header("content-type")
            .is_some_and(|t| t.starts_with("text/plain; version=0.0.4")),
        "{:?}",
        reply.header("content-type")
    );
    let text = reply.text();
    for expected in [
        "idem_begin_total{answer=\"execute\"} 2",
        "idem_begin_total{answer=\"replay\"} 1",
        "idem_finish_total{ending=\"completed\",result=\"ok\"} 2",
        "idem_store_call_seconds_bucket{call=\"claim\"",
        "idem_review_waiting 0",
        "# HELP idem_begin_total",
    ] {
        assert!(text.contains(expected), "{expected} missing from:\n{text}");
    }
    let mut promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool runs");
    promtool
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let checked = promtool.wait_with_output().unwrap();
    assert!(
        checked.status.success(),
        "promtool: {}{}\n{text}",
        String::from_utf8_lossy(&checked.stdout),
        String::from_utf8_lossy(&checked.stderr)
    );
}

/// The record of `key` (its 64 hex characters) in `store`.
pub(crate) async fn record_of(store: &idem_store::Store, key: &str) -> idem_store::RecordView {
    store
        .records()
        .list(Default::default())
        .await
        .unwrap()
        .into_iter()
        .find(|v| v.record.key.digest.to_hex() == key)
        .expect("the record")
}

/// Begins `invoice` (the server's lease is one second) and never finishes it: once
/// the lease has run out (the store's clock decides), it waits for review.
pub(crate) fn lapsed(server: &Server, store: &TestStore, invoice: &str) -> (String, u64) {
    let begun = server.ok("/v1/begin", &json!({"operation": op(invoice, "4200")}));
    assert_eq!(begun["answer"], "execute", "{begun}");
    let key = begun["key"].as_str().unwrap().to_string();
    let (rt, s) = store.open();
    rt.block_on(async {
        loop {
            if record_of(&s, &key).await.lease_remaining_ms == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    (key, begun["fence"].as_u64().unwrap())
}

/// One HTTP/1.1 exchange with chromedriver, which keeps connections open:
/// the answer is read up to its `Content-Length`, not to the close.
fn exchange(addr: &str, method: &str, path: &str, body: &[u8]) -> Vec<u8> {
    use std::io::{BufRead, BufReader, Read};
    let mut stream = std::net::TcpStream::connect(addr).expect("connect to chromedriver");
    stream
        .set_read_timeout(Some(Duration::from_secs(120)))
        .unwrap();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(body).unwrap();
    let mut reader = BufReader::new(stream);
    let mut length = 0usize;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
            break;
        }
        if let Some((name, value)) = line.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse().unwrap_or(0);
        }
    }
    let mut answer = vec![0; length];
    reader
        .read_exact(&mut answer)
        .expect("chromedriver's answer");
    answer
}

/// chromedriver on a free port, killed when dropped.
struct Driver {
    child: Child,
    base: String,
    session: String,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.call("DELETE", "", json!(null));
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Driver {
    fn start(profile: &Path) -> Driver {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver starts");
        let base = format!("127.0.0.1:{port}");
        // Ready when it answers its status (polling; no time assumed).
        while std::net::TcpStream::connect(&base).is_err() {
            std::thread::sleep(Duration::from_millis(50));
        }
        let mut driver = Driver {
            child,
            base,
            session: String::new(),
        };
        let created = driver.call(
            "POST",
            "/session",
            json!({"capabilities": {"alwaysMatch": {
                "browserName": "chrome",
                "goog:chromeOptions": {
                    "binary": "/usr/bin/chromium",
                    "args": ["--headless", "--no-sandbox", "--disable-gpu",
                             "--window-size=1200,1400",
                             format!("--user-data-dir={}", profile.display())],
                }
            }}}),
        );
        driver.session = created["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session: {created}"))
            .to_string();
        driver
    }

    /// One WebDriver command; its `value`.
    fn call(&self, method: &str, path: &str, body: Value) -> Value {
        let path = if path.starts_with("/session") && self.session.is_empty() {
            path.to_string()
        } else {
            format!("/session/{}{path}", self.session)
        };
        let body = if body.is_null() {
            Vec::new()
        } else {
            body.to_string().into_bytes()
        };
        let value: Value = serde_json::from_slice(&exchange(&self.base, method, &path, &body))
            .unwrap_or(Value::Null);
        value["value"].clone()
    }

    fn open(&self, url: &str) {
        self.call("POST", "/url", json!({"url": url}));
    }

    fn find(&self, css: &str) -> String {
        let found = self.call(
            "POST",
            "/element",
            json!({"using": "css selector", "value": css}),
        );
        found
            .as_object()
            .and_then(|o| o.values().next())
            .and_then(Value::as_str)
            .unwrap_or_else(|| panic!("no element {css}: {found}"))
            .to_string()
    }

    fn type_into(&self, css: &str, text: &str) {
        let element = self.find(css);
        self.call(
            "POST",
            &format!("/element/{element}/value"),
            json!({"text": text}),
        );
    }

    fn click(&self, css: &str) {
        let element = self.find(css);
        self.call("POST", &format!("/element/{element}/click"), json!({}));
    }

    /// The page once it shows `text`: a click that submits a form returns
    /// before the next page has loaded, so the page is read until it does
    /// (polling; a page that never shows it fails the test with what it
    /// showed).
    fn page_showing(&self, text: &str) -> String {
        let mut page = self.page();
        for _ in 0..600 {
            if page.contains(text) {
                return page;
            }
            std::thread::sleep(Duration::from_millis(50));
            page = self.page();
        }
        panic!("the page never showed {text:?}:\n{page}");
    }

    fn page(&self) -> String {
        self.call("GET", "/source", json!(null))
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    fn screenshot(&self) -> Vec<u8> {
        use base64::Engine as _;
        let png = self.call("GET", "/screenshot", json!(null));
        base64::engine::general_purpose::STANDARD
            .decode(png.as_str().expect("a screenshot"))
            .expect("base64")
    }
}

// A person signs in with the token, sees the lapsed charge with its invoice
// and amount, and settles it as completed with a reason; the store has it,
// logged with who and why. The screenshot is the book's
// (docs/images/review-console.png, refreshed with IDEM_UPDATE_DOCS=1).
#[test]
fn a_person_settles_a_lapsed_charge_in_the_console() {
    if !tool_available("operator_console::console", "chromedriver") {
        return;
    }
    let store = TestStore::sqlite();
    let server = Server::start(
        &store.url,
        &["--console", "--lease", "1s"],
        &[("IDEM_SERVE_TOKEN", TOKEN)],
    );
    let (key, fence) = lapsed(&server, &store, "INV-7");
    let profile = tempfile::tempdir().unwrap();
    let browser = Driver::start(profile.path());
    let console = format!("http://{}/console", server.addr);
    browser.open(&console);
    assert!(browser.page().contains("Sign in"), "{}", browser.page());
    browser.type_into("#token", TOKEN);
    browser.click("#sign-in");
    let page = browser.page_showing("1 record waits for review");
    assert!(page.contains("invoice_id=INV-7"), "{page}");
    assert!(page.contains("amount=4200"), "{page}");
    assert!(page.contains(&format!("Settle at fence {fence}")), "{page}");
    let shot = browser.screenshot();
    assert!(shot.starts_with(b"\x89PNG"), "a PNG");
    if std::env::var("IDEM_UPDATE_DOCS").is_ok_and(|v| v == "1") {
        std::fs::write(
            workspace_root().join("docs/images/review-console.png"),
            &shot,
        )
        .unwrap();
    }
    browser.click(&format!("#r-{key} input[value=completed]"));
    browser.type_into(&format!("#body-{key}"), "receipt R-99");
    browser.type_into(&format!("#reason-{key}"), "the provider shows the charge");
    browser.type_into(&format!("#by-{key}"), "ana");
    browser.click(&format!("#settle-{key}"));
    let page = browser.page_showing("Settled");
    assert!(page.contains("0 records wait for review"), "{page}");

    let (rt, s) = store.open();
    rt.block_on(async {
        let view = record_of(&s, &key).await;
        assert_eq!(view.record.state, RecordState::Completed);
        assert_eq!(view.record.outcome.unwrap().body, b"receipt R-99");
        let log = s
            .records()
            .attempts(AttemptFilter::default())
            .await
            .unwrap();
        let settled = log
            .iter()
            .find(|e| e.event == AttemptEvent::ResolvedCompleted)
            .expect("the resolution is logged");
        assert_eq!(settled.actor.as_deref(), Some("ana (console)"));
        assert_eq!(
            settled.detail.as_deref(),
            Some("the provider shows the charge")
        );
    });
}

/// The value of `name="NAME" value="…"` in `html` after `after`.
pub(crate) fn form_value(html: &str, after: &str, name: &str) -> String {
    let from = html.find(after).expect("the form");
    let needle = format!("name=\"{name}\" value=\"");
    let at = html[from..].find(&needle).expect("the field") + from + needle.len();
    html[at..].split('"').next().unwrap().to_string()
}

// Without a session the console shows only its sign-in; a form without
// the page's token is refused; a form for a fence the record has moved
// past is refused and changes nothing.
#[test]
fn the_console_refuses_what_a_stale_page_or_another_site_sends() {
    let store = TestStore::sqlite();
    let server = Server::start(
        &store.url,
        &["--console", "--lease", "1s"],
        &[("IDEM_SERVE_TOKEN", TOKEN)],
    );
    let (key, fence) = lapsed(&server, &store, "INV-8");
    let page = get(&server, "/console", &[]);
    assert_eq!(page.status, 401);
    assert!(page.text().contains("Sign in"));
    assert!(!page.text().contains("INV-8"), "no data before signing in");
    let csp = page.header("content-security-policy").unwrap_or_default();
    assert!(csp.contains("default-src 'none'"), "{csp}");

    // Signing in sets a strict, HTTP-only cookie scoped to the console.
    let form = [(
        "Content-Type".to_string(),
        "application/x-www-form-urlencoded".to_string(),
    )];
    let wrong = request(&server.addr, "POST", "/console/login", &form, b"token=nope");
    assert_eq!(wrong.status, 401);
    let signed = request(
        &server.addr,
        "POST",
        "/console/login",
        &form,
        format!("token={TOKEN}").as_bytes(),
    );
    assert_eq!(signed.status, 303);
    let cookie = signed
        .header("set-cookie")
        .expect("a session cookie")
        .to_string();
    for attribute in ["HttpOnly", "SameSite=Strict", "Path=/console"] {
        assert!(cookie.contains(attribute), "{cookie}");
    }
    let session = cookie.split(';').next().unwrap().to_string();
    let mut with_session = form.to_vec();
    with_session.push(("Cookie".into(), session.clone()));
    let html = get(&server, "/console", &[("Cookie".into(), session)]).text();
    assert!(html.contains("INV-8"), "{html}");
    let token = form_value(&html, &format!("value=\"{key}\""), "form_token");

    let send = |form_token: &str, fence: u64| {
        let body = format!(
            "key={key}&fence={fence}&form_token={form_token}&resolution=release&reason=checked&by=ana&window=24h"
        );
        request(
            &server.addr,
            "POST",
            "/console/resolve",
            &with_session,
            body.as_bytes(),
        )
    };
    // Another site's form cannot know the token.
    let forged = send("0000", fence);
    assert_eq!(forged.status, 403);
    assert!(forged.text().contains("does not match this session"));
    // Without the cookie, not even a well-formed form goes through.
    let body =
        format!("key={key}&fence={fence}&form_token={token}&resolution=release&reason=x&by=y");
    let anonymous = request(
        &server.addr,
        "POST",
        "/console/resolve",
        &form,
        body.as_bytes(),
    );
    assert_eq!(anonymous.status, 401);
    // The page showed fence F; meanwhile someone settled the record
    // through the API (a newer fence). The page's form is refused and
    // changes nothing.
    server.ok(
        "/v1/resolve",
        &json!({"key": key, "fence": fence, "resolution": "release",
                "by": "bob", "reason": "checked with the provider"}),
    );
    let stale = send(&token, fence);
    assert_eq!(stale.status, 409, "{}", stale.text());
    assert!(stale.text().contains("nothing changed"), "{}", stale.text());
    // It says what the record is now and who settled it, and does not
    // send the person to look for it below (it no longer waits).
    assert!(
        stale.text().contains("it is failed-retryable at fence")
            && stale
                .text()
                .contains("bob settled it (resolved-released: checked with the provider)"),
        "{}",
        stale.text()
    );
    assert!(
        !stale.text().contains("look at it again below"),
        "{}",
        stale.text()
    );
    let (rt, s) = store.open();
    let state = rt.block_on(record_of(&s, &key)).record.state;
    assert_eq!(state, RecordState::FailedRetryable, "bob's release stands");
}

// `idem run --metrics-file`: the run's ends and the store's timings in a
// file a textfile collector reads, which promtool accepts.
#[test]
fn a_run_writes_its_metrics_file() {
    if !tool_available("operator_console::metrics_file", "promtool") {
        return;
    }
    let store = TestStore::sqlite();
    let ops: String = ["r1", "r2", "r3"]
        .iter()
        .map(|i| op(i, "100").to_string() + "\n")
        .collect();
    let ops_path = store.dir.path().join("ops.jsonl");
    std::fs::write(&ops_path, ops).unwrap();
    let metrics = store.dir.path().join("idem.prom");
    let out = Command::new(idem_tests::idem_bin())
        .args(["run", "--no-cache", "--policy"])
        .arg(idem_tests::policy_path("billing-charge"))
        .args(["--store", &store.url, "--ops"])
        .arg(&ops_path)
        .arg("--metrics-file")
        .arg(&metrics)
        .args(["--", "true"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&metrics).expect("the metrics file");
    for expected in [
        "idem_run_operations{end=\"executed\"} 3",
        "idem_run_operations{end=\"sent_to_review\"} 0",
        "idem_begin_total{answer=\"execute\"} 3",
        "idem_review_waiting 0",
    ] {
        assert!(text.contains(expected), "{expected} missing from:\n{text}");
    }
    assert!(
        !store.dir.path().join("idem.partial").exists(),
        "written whole, then renamed"
    );
    let checked = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::fs::File::open(&metrics).unwrap())
        .output()
        .unwrap();
    assert!(
        checked.status.success(),
        "promtool: {}{}\n{text}",
        String::from_utf8_lossy(&checked.stdout),
        String::from_utf8_lossy(&checked.stderr)
    );
}
