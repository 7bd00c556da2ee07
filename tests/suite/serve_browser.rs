//! `idem serve` against what a web page could make a browser send, as a
//! real process: a foreign `Host` (DNS rebinding), a cross-site `POST`
//! whose body is text or unlabelled, a foreign `Origin` — each refused with
//! nothing claimed, while same-origin and non-browser calls are served —
//! and the console's own protections: HMAC form tokens (a tampered one
//! refused), the `Secure` cookie behind TLS, and a form the store finds
//! invalid answered `400`, not `409`.

use idem_store::RecordState;
use serde_json::json;

use crate::operator_console::{TOKEN, form_value, lapsed, record_of};
use crate::serve::{Reply, Server, TestStore, op};

/// `POST path` with exactly these headers (and `Host: host`).
fn post(server: &Server, host: &str, path: &str, headers: &[(&str, &str)], body: &str) -> Reply {
    let mut raw = format!(
        "POST {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        raw.push_str(&format!("{name}: {value}\r\n"));
    }
    raw.push_str("\r\n");
    raw.push_str(body);
    crate::serve::send_raw(&server.addr, raw.as_bytes())
}

fn slug(p: &serde_json::Value) -> &str {
    p["type"].as_str().unwrap().rsplit('/').next().unwrap()
}

const JSON: (&str, &str) = ("Content-Type", "application/json");

#[test]
fn the_open_sidecar_refuses_what_a_page_could_make_a_browser_send() {
    let store = TestStore::sqlite();
    let server = Server::start(&store.url, &[], &[]);
    let addr = server.addr.clone();
    let port = addr.rsplit(':').next().unwrap().to_string();
    let begin = json!({"operation": op("i1", "100")}).to_string();
    let own_origin = format!("http://{addr}");

    // DNS rebinding: the page's own name, pointed at 127.0.0.1.
    for host in [format!("evil.example:{port}"), "evil.example".into()] {
        let reply = post(&server, &host, "/v1/begin", &[JSON], &begin);
        let p = reply.problem(421);
        assert_eq!(slug(&p), "unknown-host", "{p}");
        assert!(
            p["detail"].as_str().unwrap().contains("evil.example"),
            "{p}"
        );
    }
    // A cross-site form or text POST: refused by its Origin, and by its
    // media type without one.
    for media in ["text/plain", "application/x-www-form-urlencoded"] {
        let reply = post(
            &server,
            &addr,
            "/v1/begin",
            &[("Content-Type", media), ("Origin", "http://evil.example")],
            &begin,
        );
        assert_eq!(slug(&reply.problem(403)), "cross-origin-request");
        let reply = post(
            &server,
            &addr,
            "/v1/begin",
            &[("Content-Type", media)],
            &begin,
        );
        assert_eq!(slug(&reply.problem(415)), "unsupported-media-type");
    }
    let unlabelled = post(&server, &addr, "/v1/begin", &[], &begin).problem(415);
    assert!(
        unlabelled["detail"]
            .as_str()
            .unwrap()
            .contains("no Content-Type"),
        "{unlabelled}"
    );
    // A foreign Origin, even with a JSON body (a page that got past the
    // browser's preflight somehow), and the opaque `null` origin.
    for origin in ["http://evil.example", "null", "http://localhost:1"] {
        let reply = post(
            &server,
            &addr,
            "/v1/begin",
            &[JSON, ("Origin", origin)],
            &begin,
        );
        let p = reply.problem(403);
        assert!(p["detail"].as_str().unwrap().contains(origin), "{p}");
    }
    assert!(
        store.events().is_empty(),
        "nothing was claimed: {:?}",
        store.events()
    );

    // The sidecar's own origin, a loopback name, and a client that is not
    // a browser (no Origin) are served.
    let reply = post(
        &server,
        &addr,
        "/v1/begin",
        &[JSON, ("Origin", &own_origin)],
        &begin,
    );
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(reply.json()["answer"], "execute");
    let local = format!("localhost:{port}");
    let reply = post(&server, &local, "/v1/begin", &[JSON], &begin);
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(reply.json()["answer"], "in-progress");
    let charset = ("Content-Type", "application/json; charset=utf-8");
    let reply = post(&server, &addr, "/v1/derive", &[charset], &begin);
    assert_eq!(reply.status, 200, "{}", reply.text());
    let claims = store.events().iter().filter(|e| *e == "executed").count();
    assert_eq!(claims, 1, "{:?}", store.events());
}

#[test]
fn allow_host_names_the_host_a_proxy_forwards() {
    let store = TestStore::sqlite();
    let server = Server::start(&store.url, &["--allow-host", "idem.example.com"], &[]);
    let derive = json!({"operation": op("i1", "100")}).to_string();
    let origin = ("Origin", "https://idem.example.com");
    let reply = post(
        &server,
        "idem.example.com",
        "/v1/derive",
        &[JSON, origin],
        &derive,
    );
    assert_eq!(reply.status, 200, "{}", reply.text());
    // Its own address still works; another name still does not.
    let reply = post(&server, &server.addr, "/v1/derive", &[JSON], &derive);
    assert_eq!(reply.status, 200, "{}", reply.text());
    post(&server, "other.example.com", "/v1/derive", &[JSON], &derive).problem(421);
    // A bad name is refused at start.
    let out = std::process::Command::new(idem_tests::idem_bin())
        .args(["serve", "--allow-host", "bad host!"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--allow-host"));
}

/// Signs in to the console; the `Set-Cookie` header and the cookie to send.
fn sign_in(server: &Server, origin: Option<&str>) -> (String, String) {
    let form = ("Content-Type", "application/x-www-form-urlencoded");
    let mut headers = vec![form];
    if let Some(o) = origin {
        headers.push(("Origin", o));
    }
    let signed = post(
        server,
        &server.addr,
        "/console/login",
        &headers,
        &format!("token={TOKEN}"),
    );
    assert_eq!(signed.status, 303, "{}", signed.text());
    let set = signed
        .header("set-cookie")
        .expect("a session cookie")
        .to_string();
    let cookie = set.split(';').next().unwrap().to_string();
    (set, cookie)
}

#[test]
fn the_console_checks_its_hmac_tokens_its_origin_and_its_input() {
    let store = TestStore::sqlite();
    let server = Server::start(
        &store.url,
        &["--console", "--lease", "1s"],
        &[("IDEM_SERVE_TOKEN", TOKEN)],
    );
    let (key, fence) = lapsed(&server, &store, "INV-9");
    let own = format!("http://{}", server.addr);
    let (rt, s) = store.open();
    let before = rt.block_on(record_of(&s, &key)).record;
    let (set, cookie) = sign_in(&server, Some(&own));
    assert!(!set.contains("Secure"), "plain HTTP: no Secure flag: {set}");
    let page = crate::serve::request(
        &server.addr,
        "GET",
        &format!("/console/record/{key}"),
        &[("Cookie".into(), cookie.clone())],
        b"",
    )
    .text();
    let token = form_value(&page, &format!("value=\"{key}\""), "form_token");
    assert_eq!(token.len(), 64, "an HMAC-SHA256 in hex: {token}");
    let form = ("Content-Type", "application/x-www-form-urlencoded");
    let send = |token: &str, reason: &str, status: &str, origin: &str| {
        let body = format!(
            "key={key}&fence={fence}&form_token={token}&resolution=reject&status={status}&reason={reason}&by=ana&window=24h&confirm_reject=yes"
        );
        post(
            &server,
            &server.addr,
            "/console/resolve",
            &[form, ("Cookie", &cookie), ("Origin", origin)],
            &body,
        )
    };
    // A tampered token: one character changed.
    let mut tampered = token.clone().into_bytes();
    tampered[0] = if tampered[0] == b'a' { b'b' } else { b'a' };
    let tampered = String::from_utf8(tampered).unwrap();
    let reply = send(&tampered, "checked", "", &own);
    assert_eq!(reply.status, 403, "{}", reply.text());
    assert!(reply.text().contains("does not match this session"));
    // The right token from another site's page.
    let reply = send(&token, "checked", "", "http://evil.example");
    assert_eq!(slug(&reply.problem(403)), "cross-origin-request");
    // Input the store cannot take: a form error (400), not a conflict.
    let long = "x".repeat(2000);
    for (reason, status, says) in [
        (long.as_str(), "", "at most"),
        ("a%00b", "", "NUL"),
        ("checked", "5000", "status `5000`"),
    ] {
        let reply = send(&token, reason, status, &own);
        assert_eq!(reply.status, 400, "{reason:.20} {status}: {}", reply.text());
        assert!(reply.text().contains(says), "{}", reply.text());
        assert!(
            !reply.text().contains("the store refused it"),
            "{}",
            reply.text()
        );
    }
    let after = rt.block_on(record_of(&s, &key)).record;
    assert_eq!(
        (after.state, after.fence),
        (before.state, before.fence),
        "nothing changed: it still waits for review"
    );
    // Refusing for good without its box ticked changes nothing.
    let unconfirmed = format!(
        "key={key}&fence={fence}&form_token={token}&resolution=reject&reason=checked&by=ana&window=24h"
    );
    let reply = post(
        &server,
        &server.addr,
        "/console/resolve",
        &[form, ("Cookie", &cookie), ("Origin", &own)],
        &unconfirmed,
    );
    assert_eq!(reply.status, 400, "{}", reply.text());
    assert!(
        reply.text().contains("needs its box ticked"),
        "{}",
        reply.text()
    );
    let unchanged = rt.block_on(record_of(&s, &key)).record;
    assert_eq!(unchanged.state, before.state, "nothing changed");
    // And the right token from the console's own page settles it.
    let reply = send(&token, "checked", "", &own);
    assert_eq!(reply.status, 303, "{}", reply.text());
    let state = rt.block_on(record_of(&s, &key)).record.state;
    assert_eq!(state, RecordState::FailedPermanent);
}

#[test]
fn the_session_cookie_is_secure_behind_tls() {
    let store = TestStore::sqlite();
    let server = Server::start(
        &store.url,
        &["--console", "--console-behind-tls"],
        &[("IDEM_SERVE_TOKEN", TOKEN)],
    );
    let (set, _) = sign_in(&server, None);
    for attribute in ["Secure", "HttpOnly", "SameSite=Strict", "Path=/console"] {
        assert!(
            set.split("; ").any(|a| a == attribute),
            "{attribute}: {set}"
        );
    }
    // The flag means nothing without the console.
    let out = std::process::Command::new(idem_tests::idem_bin())
        .args(["serve", "--no-cache", "--policy"])
        .arg(idem_tests::policy_path("billing-charge"))
        .args(["--store", &store.url, "--console-behind-tls"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--console"), "{stderr}");
}

// Untrusted text is spelt out, not obeyed: a bidi override in an
// operation's field and in a person's reason shows as `\u{202e}` in the
// console and on `idem report --html`'s page, never as the character that
// would make "RUE 0001" read "1000 EUR".
#[test]
fn bidi_overrides_are_spelt_out_in_the_console_and_the_report_page() {
    let store = TestStore::sqlite();
    let server = Server::start(
        &store.url,
        &["--console", "--lease", "1s"],
        &[("IDEM_SERVE_TOKEN", TOKEN)],
    );
    let (key, fence) = lapsed(&server, &store, "\u{202e}RUE 0001");
    let bearer = [("Authorization".to_string(), format!("Bearer {TOKEN}"))];
    // The list, the record's page, and a search for the field as typed
    // (percent-encoded in the URL): each shows it spelt out.
    let search = "/console?state=all&q=invoice_id%3D%E2%80%AERUE%200001";
    for path in ["/console", &format!("/console/record/{key}"), search] {
        let page = crate::serve::request(&server.addr, "GET", path, &bearer, b"").text();
        assert!(page.contains("\\u{202e}RUE 0001"), "{path}: {page}");
        assert!(
            !page.contains('\u{202e}'),
            "{path}: the override itself is on the page"
        );
        assert!(
            page.contains(&format!("/console/record/{key}")) || path.contains("/record/"),
            "a list links to the record's page: {path}: {page}"
        );
    }

    server.ok(
        "/v1/resolve",
        &json!({"key": key, "fence": fence, "resolution": "release",
                "by": "ana\u{202e}", "reason": "checked \u{202e}dlrow"}),
    );
    // Who settled it and why, on the list of settled records and the
    // record's page.
    for path in ["/console?state=settled", &format!("/console/record/{key}")] {
        let page = crate::serve::request(&server.addr, "GET", path, &bearer, b"").text();
        assert!(
            page.contains("ana\\u{202e}") && page.contains("checked \\u{202e}dlrow"),
            "{path}: {page}"
        );
        assert!(!page.contains('\u{202e}'), "{path}: {page}");
    }
    let html = store.dir.path().join("report.html");
    let out = std::process::Command::new(idem_tests::idem_bin())
        .args(["report", "--store", &store.url, "--html"])
        .arg(&html)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report = std::fs::read_to_string(&html).unwrap();
    assert!(report.contains("checked \\u{202e}dlrow"), "{report}");
    assert!(
        !report.contains('\u{202e}'),
        "the override itself is on the page"
    );
}
