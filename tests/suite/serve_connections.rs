//! `idem serve` against stalled and hostile clients, as a real process: a
//! stalled client cannot keep a stopping sidecar alive past its drain
//! deadline; idle, kept-alive and slow connections are closed on time while
//! others are served; a flood at a low open-file limit is refused fast and
//! logged; a completion retried after a lost answer is answered as the first
//! was. Every wait below has a bound that only a hang reaches.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use serde_json::json;

use crate::serve::{Launch, Server, TestStore, op, read_reply};

/// Far more than any timeout the servers below are given: reached only
/// if something hangs.
const HANG: Duration = Duration::from_secs(60);

/// The stderr of a server, written to a file in `store`'s directory.
fn log_file(store: &TestStore, name: &str) -> (std::fs::File, std::path::PathBuf) {
    let path = store.dir.path().join(name);
    (std::fs::File::create(&path).unwrap(), path)
}

/// Whether the server closed `stream` (end of stream or a reset), reading
/// at most until [`HANG`]. Bytes before the close (an answer) are skipped.
fn closed_by_server(stream: &mut TcpStream) -> bool {
    stream.set_read_timeout(Some(HANG)).unwrap();
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return false;
            }
            Err(_) => return true,
        }
    }
}

fn begin_head(addr: &str, len: usize) -> String {
    format!(
        "POST /v1/begin HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {len}\r\n\r\n"
    )
}

/// Holds SQLite's write lock on `store`'s file, as another program would,
/// until dropped: a claim waits for it (the server is given a long
/// `busy_timeout_ms`), so a call stays in flight for as long as a test
/// needs.
fn lock_sqlite(store: &TestStore) -> rusqlite::Connection {
    let path = store.url.strip_prefix("sqlite:").expect("a SQLite store");
    let lock = rusqlite::Connection::open(path).unwrap();
    lock.execute_batch("BEGIN EXCLUSIVE").unwrap();
    lock
}

/// `store`'s URL with a busy timeout far past any test's wait.
fn patient(store: &TestStore) -> String {
    format!("{}?busy_timeout_ms=600000", store.url)
}

// A client that sent its head and part of its body and then stalls has
// reached nothing: at SIGTERM it is answered 503 at once, and the sidecar
// exits 0 without waiting for a drain deadline of an hour.
#[test]
fn a_stalled_client_cannot_hold_a_stopping_sidecar() {
    let store = TestStore::sqlite();
    let (log, log_path) = log_file(&store, "stderr.log");
    let mut server = Server::start_with(
        &store.url,
        &["--drain-timeout", "1h"],
        &[],
        Launch {
            stderr: Some(log),
            ..Launch::default()
        },
    );
    // One client sends a head and a tenth of its body, then stalls; another
    // sends half a head; a third is connected and silent.
    let body = json!({"operation": op("i1", "100")}).to_string();
    let mut stalled_body = TcpStream::connect(&server.addr).unwrap();
    stalled_body
        .write_all(begin_head(&server.addr, body.len()).as_bytes())
        .unwrap();
    stalled_body
        .write_all(&body.as_bytes()[..body.len() / 10])
        .unwrap();
    let mut stalled_head = TcpStream::connect(&server.addr).unwrap();
    stalled_head
        .write_all(b"POST /v1/begin HTTP/1.1\r\nHo")
        .unwrap();
    let mut silent = TcpStream::connect(&server.addr).unwrap();
    // A served call shows the server is up; the stalled ones were sent
    // before it, on connections it has accepted.
    server.ok("/v1/derive", &json!({"operation": op("i9", "1")}));
    std::thread::sleep(Duration::from_millis(300));

    server.signal("-TERM");
    let status = server.wait_at_most(HANG, "a stalled body held it towards --drain-timeout 1h");
    assert_eq!(status.code(), Some(0), "nothing was cut: exit 0");
    let log = std::fs::read_to_string(&log_path).unwrap();
    assert!(log.contains("calls in flight finished"), "{log}");
    stalled_body.set_read_timeout(Some(HANG)).unwrap();
    let reply = read_reply(stalled_body);
    let p = reply.problem(503);
    assert!(p["type"].as_str().unwrap().ends_with("/stopping"), "{p}");
    assert_eq!(reply.header("retry-after"), Some("1"));
    for stream in [&mut stalled_head, &mut silent] {
        assert!(closed_by_server(stream), "every connection is closed");
    }
    // Nothing was begun: the stalled begin never reached the store.
    assert!(store.events().is_empty(), "{:?}", store.events());
}

// A call that is running (its claim waits for a store another program
// locks) past the drain deadline is cut: its client gets no answer, the
// sidecar says how many were cut and exits 1.
#[test]
fn a_call_still_running_at_the_drain_deadline_is_cut() {
    let store = TestStore::sqlite();
    let (log, log_path) = log_file(&store, "stderr.log");
    let mut server = Server::start_with(
        &patient(&store),
        &["--drain-timeout", "1s"],
        &[],
        Launch {
            stderr: Some(log),
            ..Launch::default()
        },
    );
    let lock = lock_sqlite(&store);
    let body = json!({"operation": op("i1", "100")}).to_string();
    let mut running = TcpStream::connect(&server.addr).unwrap();
    running
        .write_all(format!("{}{body}", begin_head(&server.addr, body.len())).as_bytes())
        .unwrap();
    // Time for the whole request to be read and reach the store's lock.
    std::thread::sleep(Duration::from_millis(1000));
    server.signal("-TERM");
    // The store call it made cannot be cut while it waits in SQLite's busy
    // handler (it blocks its thread): the lock is let go well after the 1 s
    // deadline (an ordering aid, not a measurement). Whether the call's
    // answer still goes out then is not asserted: see the report of issue
    // 42 (a call blocked in the store is counted cut, yet may be answered).
    std::thread::sleep(Duration::from_secs(3));
    drop(lock);
    drop(running);
    let status = server.wait_at_most(HANG, "a running call held it past --drain-timeout 1s");
    assert_eq!(status.code(), Some(1), "a drain that cut a call exits 1");
    let log = std::fs::read_to_string(&log_path).unwrap();
    assert!(
        log.contains("1 call(s) still running at the drain deadline (1000 ms) were cut"),
        "{log}"
    );
    // A cut begin claimed or did not (its claim then waits for its lease).
    let events = store.events();
    assert!(
        events.iter().all(|e| e == "executed") && events.len() <= 1,
        "{events:?}"
    );
}

// A connection that never sends a byte is closed at the header timeout,
// not kept for the idle timeout (an hour here).
#[test]
fn a_connection_that_sends_nothing_is_closed_at_the_header_timeout() {
    let store = TestStore::sqlite();
    let server = Server::start(
        &store.url,
        &["--header-timeout", "1s", "--idle-timeout", "1h"],
        &[],
    );
    let mut silent = TcpStream::connect(&server.addr).unwrap();
    // Waited for at most HANG (a minute), far less than the idle hour.
    assert!(
        closed_by_server(&mut silent),
        "a silent connection is closed long before --idle-timeout 1h"
    );
    server.ok("/v1/derive", &json!({"operation": op("i1", "1")}));
}

#[test]
fn a_clean_drain_exits_0_with_idle_connections_open() {
    let store = TestStore::sqlite();
    let mut server = Server::start(&store.url, &["--drain-timeout", "1h"], &[]);
    let mut idle = TcpStream::connect(&server.addr).unwrap();
    let mut half_head = TcpStream::connect(&server.addr).unwrap();
    half_head
        .write_all(b"POST /v1/derive HTTP/1.1\r\n")
        .unwrap();
    server.ok("/v1/derive", &json!({"operation": op("i9", "1")}));
    server.signal("-TERM");
    // Nothing in flight: no wait for the hour-long deadline, and status 0.
    let status = server.wait_at_most(HANG, "idle connections held it until the deadline");
    assert_eq!(status.code(), Some(0));
    assert!(closed_by_server(&mut idle));
    assert!(closed_by_server(&mut half_head));
}

#[test]
fn idle_kept_alive_and_slow_connections_are_closed_while_others_are_served() {
    let store = TestStore::sqlite();
    let server = Server::start(
        &store.url,
        &["--idle-timeout", "1s", "--header-timeout", "2s"],
        &[],
    );
    // A connection that never sends a byte.
    let mut idle = TcpStream::connect(&server.addr).unwrap();
    // One that served a request and stays open (keep-alive), then waits.
    let mut kept = TcpStream::connect(&server.addr).unwrap();
    let body = json!({"operation": op("i1", "1")}).to_string();
    kept.write_all(
        format!(
            "POST /v1/derive HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            server.addr,
            body.len()
        )
        .as_bytes(),
    )
    .unwrap();
    // One that sends its head a byte at a time, every 200 ms, for ever.
    let mut slow = TcpStream::connect(&server.addr).unwrap();
    let mut trickle = slow.try_clone().unwrap();
    let trickler = std::thread::spawn(move || {
        let head = b"POST /v1/derive HTTP/1.1\r\nX-Slow: ".repeat(1000);
        for byte in head {
            if trickle.write_all(&[byte]).is_err() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        false
    });
    // Others are served meanwhile.
    for i in 0..5 {
        server.ok(
            "/v1/derive",
            &json!({"operation": op(&format!("i{i}"), "1")}),
        );
    }
    assert!(closed_by_server(&mut idle), "an idle connection is closed");
    let mut answer = Vec::new();
    kept.set_read_timeout(Some(HANG)).unwrap();
    let closed = kept.read_to_end(&mut answer).is_ok();
    assert!(
        closed && answer.starts_with(b"HTTP/1.1 200"),
        "a kept-alive connection is answered, then closed when idle: {}",
        String::from_utf8_lossy(&answer)
    );
    assert!(closed_by_server(&mut slow), "a slow head is cut");
    assert!(
        trickler.join().unwrap(),
        "the trickle's writes fail once cut"
    );
    // And the server still serves.
    server.ok("/v1/derive", &json!({"operation": op("i1", "1")}));
}

// The wait between requests is timed apart from a head: a kept-alive
// connection waits past --header-timeout (an idle hour here) and is served
// again. (hyper's own head timer would count that wait as the next head's.)
#[test]
fn a_kept_alive_connection_waits_its_idle_timeout_not_its_header_timeout() {
    let store = TestStore::sqlite();
    let server = Server::start(
        &store.url,
        &["--header-timeout", "1s", "--idle-timeout", "1h"],
        &[],
    );
    let body = json!({"operation": op("i1", "1")}).to_string();
    let request = |close: &str| {
        format!(
            "POST /v1/derive HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n{close}Content-Length: {}\r\n\r\n{body}",
            server.addr,
            body.len()
        )
    };
    let mut kept = TcpStream::connect(&server.addr).unwrap();
    kept.write_all(request("").as_bytes()).unwrap();
    // Twice the header timeout, idle after the first answer.
    std::thread::sleep(Duration::from_secs(2));
    kept.write_all(request("Connection: close\r\n").as_bytes())
        .unwrap();
    kept.set_read_timeout(Some(HANG)).unwrap();
    let mut answers = Vec::new();
    kept.read_to_end(&mut answers).unwrap();
    let answers = String::from_utf8_lossy(&answers);
    assert_eq!(
        answers.matches("HTTP/1.1 200 ").count(),
        2,
        "both requests are answered on the one connection: {answers}"
    );
}

#[test]
fn a_flood_at_a_low_file_limit_is_refused_fast_and_logged() {
    let store = TestStore::sqlite();
    let (log, log_path) = log_file(&store, "stderr.log");
    // 128 descriptors: the default cap is 128 - 64 = 64 connections.
    let server = Server::start_with(
        &store.url,
        &[],
        &[],
        Launch {
            stderr: Some(log),
            file_limit: Some(128),
        },
    );
    let mut flood: Vec<TcpStream> = (0..200)
        .map(|_| TcpStream::connect(&server.addr).unwrap())
        .collect();
    // A call now is refused at once with a problem document, not left to
    // hang behind the flood.
    let refused = server.post("/v1/derive", &json!({"operation": op("i1", "1")}));
    let problem = refused.problem(503);
    assert!(
        problem["type"]
            .as_str()
            .unwrap()
            .ends_with("/too-many-connections"),
        "{problem}"
    );
    assert_eq!(refused.header("retry-after"), Some("1"));
    // The flood leaves: calls are served again.
    flood.clear();
    let started = std::time::Instant::now();
    loop {
        let reply = server.post("/v1/derive", &json!({"operation": op("i1", "1")}));
        if reply.status == 200 {
            break;
        }
        assert!(
            started.elapsed() < HANG,
            "never served again: {}",
            reply.text()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(server);
    let log = std::fs::read_to_string(&log_path).unwrap();
    assert!(
        log.contains("refused a connection over --max-connections: 64 connections are open"),
        "{log}"
    );
    assert!(!log.contains('\u{1b}'), "no colour codes in a file: {log}");
}

#[test]
fn accept_failures_at_the_file_limit_are_logged_and_outlived() {
    let store = TestStore::sqlite();
    let (log, log_path) = log_file(&store, "stderr.log");
    // A cap above what the file limit allows: accept itself fails.
    let server = Server::start_with(
        &store.url,
        &["--max-connections", "1000", "--idle-timeout", "1s"],
        &[],
        Launch {
            stderr: Some(log),
            file_limit: Some(64),
        },
    );
    let flood: Vec<TcpStream> = (0..100)
        .map(|_| TcpStream::connect(&server.addr).unwrap())
        .collect();
    // Served once the idle ones are closed (the call waits in the backlog
    // meanwhile).
    server.ok("/v1/derive", &json!({"operation": op("i1", "1")}));
    drop(flood);
    drop(server);
    let log = std::fs::read_to_string(&log_path).unwrap();
    assert!(
        log.contains("accepting a connection failed: Too many open files"),
        "{log}"
    );
}

#[test]
fn a_completion_retried_after_a_lost_answer_is_answered_as_the_first() {
    let store = TestStore::sqlite();
    let server = Server::start(&store.url, &[], &[]);
    let begun = server.ok("/v1/begin", &json!({"operation": op("i1", "100")}));
    let complete = json!({"key": begun["key"], "fence": begun["fence"], "body": "receipt 1"});
    let first = server.ok("/v1/complete", &complete);
    // The same end again (its answer was lost): the same answer.
    assert_eq!(server.ok("/v1/complete", &complete), first);
    // Another end under the same fence: refused, naming both.
    let other = server.post(
        "/v1/complete",
        &json!({"key": begun["key"], "fence": begun["fence"], "body": "receipt 22"}),
    );
    let p = other.problem(409);
    let detail = p["detail"].as_str().unwrap();
    assert!(
        detail.contains("completed with status 0 and a 9-byte body")
            && detail.contains("this call sends completed with status 0 and a 10-byte body"),
        "{p}"
    );
    let failed = server.post(
        "/v1/fail",
        &json!({"key": begun["key"], "fence": begun["fence"], "retryable": true}),
    );
    let p = failed.problem(409);
    assert!(
        p["detail"]
            .as_str()
            .unwrap()
            .contains("this call sends failed-retryable"),
        "{p}"
    );
    // The record is as the first completion left it.
    let replay = server.ok("/v1/begin", &json!({"operation": op("i1", "100")}));
    assert_eq!(replay["outcome"]["body"], "receipt 1");
    // The retry wrote nothing: one completion in the log.
    let completions = store
        .events()
        .into_iter()
        .filter(|e| e == "completed")
        .count();
    assert_eq!(completions, 1);
}

/// A raw answer to a request, for the repeated-name checks.
fn raw(server: &Server, path: &str, body: &str) -> crate::serve::Reply {
    let stream = {
        let mut s = TcpStream::connect(&server.addr).unwrap();
        s.set_read_timeout(Some(HANG)).unwrap();
        s.write_all(
            format!(
                "POST {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                server.addr,
                body.len()
            )
            .as_bytes(),
        )
        .unwrap();
        s
    };
    read_reply(stream)
}

#[test]
fn a_repeated_member_name_is_refused_on_every_route() {
    let store = TestStore::sqlite();
    let server = Server::start(&store.url, &[], &[]);
    let key = "0".repeat(64);
    let d1 = op("d1", "100").to_string();
    let d2 = op("d2", "100").to_string();
    let fields_twice = r#"{"operation":{"kind":"charge","tenant":"acme","fields":{"customer":"c1","billing_period":"2026-11","invoice_id":"d1","invoice_id":"d2","amount":"1","currency":"EUR"}}}"#;
    let cases = [
        (
            "/v1/derive",
            fields_twice.to_string(),
            "operation.fields.invoice_id",
        ),
        (
            "/v1/begin",
            fields_twice.to_string(),
            "operation.fields.invoice_id",
        ),
        (
            "/v1/begin",
            format!(r#"{{"operation":{d1},"operation":{d2}}}"#),
            "operation",
        ),
        (
            "/v1/complete",
            format!(r#"{{"key":"{key}","fence":1,"fence":2}}"#),
            "fence",
        ),
        (
            "/v1/fail",
            format!(r#"{{"key":"{key}","fence":1,"retryable":true,"retryable":false}}"#),
            "retryable",
        ),
        (
            "/v1/heartbeat",
            format!(r#"{{"key":"{key}","key":"{key}","fence":1,"lease_ms":5000}}"#),
            "key",
        ),
        (
            "/v1/resolve",
            format!(
                r#"{{"key":"{key}","fence":1,"resolution":"release","reason":"a","reason":"b","by":"x"}}"#
            ),
            "reason",
        ),
        (
            "/v1/report",
            r#"{"run_id":"a","run_id":"b"}"#.to_string(),
            "run_id",
        ),
    ];
    for (path, body, member) in cases {
        let reply = raw(&server, path, &body);
        let p = reply.problem(400);
        assert_eq!(p["member"], member, "{path} {body}: {p}");
        assert!(
            p["detail"].as_str().unwrap().contains("appears twice"),
            "{p}"
        );
    }
    assert!(store.events().is_empty(), "nothing was begun");
}

#[test]
fn the_http_servers_own_refusals_are_problem_documents() {
    let store = TestStore::sqlite();
    let server = Server::start(&store.url, &[], &[]);
    let body = json!({"operation": op("i1", "1")}).to_string();
    let cases: Vec<(Vec<u8>, u16, &str)> = vec![
        (b"GARBAGE\r\n\r\n".to_vec(), 400, "malformed-request"),
        (
            format!(
                "POST /v1/derive HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\nContent-Length: {}\r\n\r\n{body}",
                body.len(),
                body.len() + 1
            )
            .into_bytes(),
            400,
            "malformed-request",
        ),
        // A head past 64 KiB, however it is split across reads (a head at
        // most twice the limit could slip through in one large read).
        (
            format!(
                "POST /v1/{} HTTP/1.1\r\nHost: x\r\n\r\n",
                "a".repeat(300_000)
            )
            .into_bytes(),
            431,
            "headers-too-large",
        ),
        (
            format!(
                "POST /v1/derive HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
                "b".repeat(300_000)
            )
            .into_bytes(),
            431,
            "headers-too-large",
        ),
    ];
    for (request, status, slug) in cases {
        let reply = crate::serve::send_raw(&server.addr, &request);
        let p = reply.problem(status);
        assert!(
            p["type"].as_str().unwrap().ends_with(&format!("/{slug}")),
            "{p}"
        );
    }
    // The server is unharmed, and a good call on a kept-alive connection
    // is answered as ever.
    server.ok("/v1/derive", &json!({"operation": op("i1", "1")}));
}
