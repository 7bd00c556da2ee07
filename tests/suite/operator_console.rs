//! What an operator watches and settles through `idem serve`: the metrics
//! endpoint (`--metrics`), checked by Prometheus's own `promtool`, and the
//! review console (`--console`), clicked through in a real headless
//! Chromium driven by Debian's chromedriver (WebDriver over HTTP): sign in
//! with the token, settle a lapsed charge, and find the store changed —
//! plus the refusals a console must make (no session, a forged form, a
//! stale fence).

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use idem_store::{AttemptEvent, AttemptFilter, Digest, RecordKey, RecordState};
use idem_tests::tool_available;
use serde_json::json;

use crate::serve::{Reply, Server, TestStore, op, request};
use crate::webdriver::Driver;

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

/// The record of `key` (its 64 hex characters) in `store`, in the billing
/// policy's namespace.
pub(crate) async fn record_of(store: &idem_store::Store, key: &str) -> idem_store::RecordView {
    let key = RecordKey::new("billing", Digest::from_hex(key).expect("a key"));
    store
        .records()
        .get(&key)
        .await
        .unwrap()
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

// A person signs in with the token, sees the lapsed charge waiting, opens
// its page with its invoice and amount, and settles it as completed with a
// reason; the page shows who settled it, and the store has it, logged with
// who and why.
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
    browser.click(&format!("a[href=\"/console/record/{key}\"]"));
    let page = browser.page_showing(&format!("Settle at fence {fence}"));
    assert!(page.contains("INV-7") && page.contains("4200"), "{page}");
    browser.click(&format!("#r-{key} input[value=completed]"));
    browser.type_into(&format!("#body-{key}"), "receipt R-99");
    browser.type_into(&format!("#reason-{key}"), "the provider shows the charge");
    browser.type_into(&format!("#by-{key}"), "ana");
    browser.click(&format!("#settle-{key}"));
    let page = browser.page_showing("Settled by");
    assert!(page.contains("ana (console)"), "{page}");
    assert!(
        !page.contains("Settle at fence"),
        "no form once settled: {page}"
    );

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
    let html = get(&server, "/console", &[("Cookie".into(), session.clone())]).text();
    assert!(html.contains("INV-8"), "{html}");
    let record = format!("/console/record/{key}");
    let html = get(&server, &record, &[("Cookie".into(), session.clone())]).text();
    // A key with no record, and one that is not a key (shown escaped), are
    // pages that say so: 404, never a 500.
    let cookie = [("Cookie".to_string(), session.clone())];
    let missing = get(
        &server,
        &format!("/console/record/{}", "0".repeat(64)),
        &cookie,
    );
    assert_eq!(missing.status, 404, "{}", missing.text());
    assert!(
        missing.text().contains("no record with key"),
        "{}",
        missing.text()
    );
    let bad = get(&server, "/console/record/%3Cb%3Ex", &cookie);
    assert_eq!(bad.status, 404, "{}", bad.text());
    assert!(
        bad.text().contains("`&lt;b&gt;x` is not a record key") && !bad.text().contains("<b>x"),
        "{}",
        bad.text()
    );
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
