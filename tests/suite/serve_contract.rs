//! `idem serve` against its contract: the OpenAPI document
//! (docs/reference/serve-openapi.json) checked against the running server, and a
//! generated fuzz of bad input over real HTTP — every bad request a 4xx
//! problem naming what was wrong, and nothing stored.

use std::collections::BTreeSet;
use std::time::Duration;

use idem_store::{AttemptFilter, ListFilter, RecordState};
use idem_tests::workspace_root;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{Map, Value, json};

use crate::serve::{Reply, Server, TestStore, op, request, send_raw};
use crate::serve_schema::validate;

fn document() -> Value {
    let path = workspace_root().join("docs/reference/serve-openapi.json");
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap())
        .unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()))
}

/// The (method, path) pairs the document describes.
fn documented_routes(doc: &Value) -> BTreeSet<(String, String)> {
    let mut out = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            out.insert((method.to_ascii_uppercase(), path.clone()));
        }
    }
    out
}

#[test]
fn the_openapi_document_is_what_the_server_does() {
    let doc = document();
    assert_eq!(doc["openapi"], "3.1.0");

    // Every route the server has is in the document, and no other.
    let served: BTreeSet<(String, String)> = idem_serve::ROUTES
        .iter()
        .map(|(m, p)| (m.to_string(), p.to_string()))
        .collect();
    assert_eq!(documented_routes(&doc), served);

    // Every example in the document fits its own schema.
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            let at = format!("{method} {path}");
            let content = &operation["requestBody"]["content"]["application/json"];
            for (name, ex) in content["examples"].as_object().unwrap() {
                // The examples of bad requests do not fit, on purpose.
                if ex["x-idem-expect"]
                    .as_str()
                    .is_some_and(|e| e.starts_with('2'))
                {
                    let at = format!("{at} request {name}");
                    validate(&doc, &content["schema"], &ex["value"], &at).unwrap();
                }
            }
            for (status, response) in operation["responses"].as_object().unwrap() {
                for (media, c) in response["content"].as_object().unwrap() {
                    for (name, ex) in c["examples"].as_object().unwrap() {
                        let at = format!("{at} {status} {media} {name}");
                        validate(&doc, &c["schema"], &ex["value"], &at).unwrap();
                    }
                }
            }
        }
    }

    // Every request example, sent to a real server (after the set-up it
    // names), gets the answer the document says: the status, the media
    // type, a body that fits the documented schema and has the members of
    // the documented example.
    let store = TestStore::sqlite();
    let lease_ms = 2000;
    let server = Server::start(&store.url, &["--lease", "2s"], &[]);
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            assert_eq!(method, "post");
            let examples = operation["requestBody"]["content"]["application/json"]["examples"]
                .as_object()
                .unwrap();
            for (name, example) in examples {
                let at = format!("{method} {path} example {name}");
                let mut value = example["value"].clone();
                if let Some(setup) = example.get("x-idem-setup") {
                    set_up(&server, setup, &mut value, lease_ms, &at);
                }
                let reply = server.post(path, &value);
                let expect = example["x-idem-expect"].as_str().expect("x-idem-expect");
                let (status, response_name) = expect.split_once('/').unwrap();
                assert_eq!(reply.status.to_string(), status, "{at}: {}", reply.text());
                let response = &operation["responses"][status];
                let media = reply.header("content-type").unwrap_or("").to_string();
                let content = &response["content"][media.as_str()];
                assert!(
                    content.is_object(),
                    "{at}: the document has no {media} answer for {status}"
                );
                let real = reply.json();
                validate(&doc, &content["schema"], &real, &at)
                    .unwrap_or_else(|e| panic!("{e}\nthe server answered {real}"));
                let documented = &content["examples"][response_name]["value"];
                assert!(
                    documented.is_object(),
                    "{at}: no response example {response_name}"
                );
                let names = |v: &Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
                assert_eq!(names(&real), names(documented), "{at}: {real}");
                for same in ["answer", "type", "state"] {
                    assert_eq!(real.get(same), documented.get(same), "{at}: {real}");
                }
            }
        }
    }

    // Another method on a documented path, and a path it does not
    // document, are problems too.
    for (_, path) in idem_serve::ROUTES {
        request(&server.addr, "GET", path, &[], b"").problem(405);
    }
    request(&server.addr, "POST", "/v1/nothing", &[], b"{}").problem(404);
}

/// Does what an example's `x-idem-setup` says: begin its operation, then
/// complete it, hold it, or let its lease lapse; and with `use`, puts that
/// claim's key and fence (or a fence past it) into the example.
fn set_up(server: &Server, setup: &Value, value: &mut Value, lease_ms: u64, at: &str) {
    let begun = server.ok("/v1/begin", &json!({"operation": setup["begin"]}));
    assert_eq!(begun["answer"], "execute", "{at}: set-up {begun}");
    match setup["then"].as_str().unwrap() {
        "complete" => {
            server.ok(
                "/v1/complete",
                &json!({"key": begun["key"], "fence": begun["fence"], "body": "receipt 42"}),
            );
        }
        "hold" => {}
        "expire" => std::thread::sleep(Duration::from_millis(lease_ms + 500)),
        other => panic!("{at}: unknown set-up {other}"),
    }
    let fence = begun["fence"].as_u64().unwrap();
    match setup.get("use").and_then(Value::as_str) {
        None => {}
        Some("fence") => {
            value["key"] = begun["key"].clone();
            value["fence"] = fence.into();
        }
        Some("stale-fence") => {
            value["key"] = begun["key"].clone();
            value["fence"] = (fence + 1).into();
        }
        Some(other) => panic!("{at}: unknown use {other}"),
    }
}

/// A route, a request it accepts (every member given), and the members
/// it requires.
struct Route {
    path: &'static str,
    valid: Value,
    required: &'static [&'static str],
}

fn routes() -> Vec<Route> {
    let key = "ab".repeat(32);
    vec![
        Route {
            path: "/v1/derive",
            valid: json!({"operation": op("i1", "100")}),
            required: &["operation"],
        },
        Route {
            path: "/v1/begin",
            valid: json!({"operation": op("i1", "100"), "caller": "billing@web-3:4242"}),
            required: &["operation"],
        },
        Route {
            path: "/v1/complete",
            valid: json!({"key": key, "fence": 1, "status": 0, "body": "x"}),
            required: &["key", "fence"],
        },
        Route {
            path: "/v1/fail",
            valid: json!({"key": key, "fence": 1, "retryable": true, "status": 1, "error": "e"}),
            required: &["key", "fence", "retryable"],
        },
        Route {
            path: "/v1/heartbeat",
            valid: json!({"key": key, "fence": 1, "lease_ms": 60000}),
            required: &["key", "fence", "lease_ms"],
        },
        Route {
            path: "/v1/resolve",
            valid: json!({"key": key, "fence": 1, "resolution": "release", "reason": "r", "by": "b"}),
            required: &["key", "fence", "resolution", "reason", "by"],
        },
        Route {
            path: "/v1/report",
            valid: json!({"since_ms": 0, "until_ms": 1, "run_id": "r", "key": key}),
            required: &[],
        },
    ]
}

/// One bad request and what its answer must say.
#[derive(Debug, Clone)]
struct Bad {
    path: &'static str,
    /// The raw HTTP request.
    raw: Vec<u8>,
    status: u16,
    /// Text the problem's `detail` must contain (a member's name, the
    /// limit).
    names: Option<String>,
}

const LIMIT: usize = 4096;

/// The `Host` the generated requests carry, put right by [`addressed`]
/// once the server's port is known (the sidecar refuses a `Host` that is
/// not its own).
const HOST: &str = "Host: idem\r\n";

/// `raw` with its [`HOST`] line naming `addr`.
fn addressed(raw: &[u8], addr: &str) -> Vec<u8> {
    let at = raw
        .windows(HOST.len())
        .position(|w| w == HOST.as_bytes())
        .expect("a generated request names its Host");
    let mut out = raw[..at].to_vec();
    out.extend_from_slice(format!("Host: {addr}\r\n").as_bytes());
    out.extend_from_slice(&raw[at + HOST.len()..]);
    out
}

fn raw_post(path: &str, content_type: Option<&str>, body: &[u8]) -> Vec<u8> {
    let mut head = format!(
        "POST {path} HTTP/1.1\r\n{HOST}Connection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    if let Some(t) = content_type {
        head.push_str(&format!("Content-Type: {t}\r\n"));
    }
    head.push_str("\r\n");
    let mut raw = head.into_bytes();
    raw.extend_from_slice(body);
    raw
}

fn json_post(path: &'static str, body: &Value, status: u16, names: Option<String>) -> Bad {
    Bad {
        path,
        raw: raw_post(path, Some("application/json"), body.to_string().as_bytes()),
        status,
        names,
    }
}

/// A value of another JSON type than `v` (and never `null` where a member
/// may be absent, since `null` there means "absent").
fn other_type(v: &Value, pick: usize) -> Value {
    let choices = [
        json!("text"),
        json!(-7),
        json!(1.5),
        json!(true),
        json!([1, 2]),
        json!({"a": 1}),
    ];
    let kind = |x: &Value| match x {
        Value::String(_) => 0,
        Value::Number(n) if n.is_i64() || n.is_u64() => 1,
        Value::Number(_) => 2,
        Value::Bool(_) => 3,
        Value::Array(_) => 4,
        Value::Object(_) => 5,
        Value::Null => 6,
    };
    let others: Vec<&Value> = choices
        .iter()
        .filter(|c| kind(c) != kind(v) && !(kind(v) == 1 && kind(c) == 2))
        .collect();
    others[pick % others.len()].clone()
}

/// Every kind of bad request, generated.
fn bad_requests() -> impl Strategy<Value = Bad> {
    let route = (0..7usize, any::<usize>());
    prop_oneof![
        // Random bytes as the body.
        (route.clone(), proptest::collection::vec(any::<u8>(), 0..200)).prop_filter_map(
            "bytes that happen to be an accepted body",
            |((r, _), bytes)| {
                let route = &routes()[r];
                if serde_json::from_slice::<Map<String, Value>>(&bytes).is_ok() {
                    return None;
                }
                Some(Bad {
                    path: route.path,
                    raw: raw_post(route.path, Some("application/json"), &bytes),
                    status: 400,
                    names: None,
                })
            }
        ),
        // A valid body cut short: malformed JSON.
        route.clone().prop_map(|(r, cut)| {
            let route = &routes()[r];
            let text = route.valid.to_string();
            let cut = 1 + cut % (text.len() - 1);
            Bad {
                path: route.path,
                raw: raw_post(route.path, Some("application/json"), &text.as_bytes()[..cut]),
                status: 400,
                names: Some("not valid JSON".into()),
            }
        }),
        // One member of the wrong type.
        (route.clone(), any::<usize>()).prop_map(|((r, m), pick)| {
            let route = &routes()[r];
            let mut body = route.valid.clone();
            let members: Vec<String> = body.as_object().unwrap().keys().cloned().collect();
            let member = members[m % members.len()].clone();
            body[&member] = other_type(&body[&member], pick);
            json_post(route.path, &body, 400, Some(format!("`{member}`")))
        }),
        // An unknown member.
        (route.clone(), "[a-z][a-z_]{0,11}").prop_filter_map(
            "a member the route has",
            |((r, _), name)| {
                let route = &routes()[r];
                let mut body = route.valid.clone();
                if body.get(&name).is_some() {
                    return None;
                }
                body[&name] = json!(1);
                Some(json_post(route.path, &body, 400, Some(format!("`{name}`"))))
            }
        ),
        // A required member missing.
        route.clone().prop_filter_map("a route with required members", |(r, m)| {
            let route = &routes()[r];
            if route.required.is_empty() {
                return None;
            }
            let member = route.required[m % route.required.len()];
            let mut body = route.valid.clone();
            body.as_object_mut().unwrap().remove(member);
            Some(json_post(route.path, &body, 400, Some(format!("`{member}`"))))
        }),
        // A body past the limit, declared (nothing else is sent: the server
        // answers on the header alone).
        (route.clone(), 1..10 * LIMIT).prop_map(|((r, _), extra)| {
            let path = routes()[r].path;
            let head = format!(
                "POST {path} HTTP/1.1\r\n{HOST}Connection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
                LIMIT + extra
            );
            Bad {
                path,
                raw: head.into_bytes(),
                status: 413,
                names: Some(LIMIT.to_string()),
            }
        }),
        // A body past the limit, chunked (no length declared): exactly one
        // byte too many, so the server has read all that was sent.
        route.clone().prop_map(|(r, _)| {
            let path = routes()[r].path;
            let mut raw = format!(
                "POST {path} HTTP/1.1\r\n{HOST}Connection: close\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n",
                LIMIT + 1
            )
            .into_bytes();
            raw.extend(std::iter::repeat_n(b' ', LIMIT + 1));
            Bad {
                path,
                raw,
                status: 413,
                names: Some(LIMIT.to_string()),
            }
        }),
        // A body that says it is not JSON.
        (route.clone(), "(text/plain|application/x-www-form-urlencoded|application/xml|multipart/form-data)").prop_map(
            |((r, _), media)| {
                let route = &routes()[r];
                Bad {
                    path: route.path,
                    raw: raw_post(route.path, Some(&media), route.valid.to_string().as_bytes()),
                    status: 415,
                    names: Some(media),
                }
            }
        ),
        // A body that does not say what it is: a browser's cross-site
        // POST may send one without asking.
        route.prop_map(|(r, _)| {
            let route = &routes()[r];
            Bad {
                path: route.path,
                raw: raw_post(route.path, None, route.valid.to_string().as_bytes()),
                status: 415,
                names: Some("no Content-Type".into()),
            }
        }),
    ]
}

#[test]
fn generated_bad_requests_get_a_named_4xx_and_store_nothing() {
    let store = TestStore::sqlite();
    let server = Server::start(&store.url, &["--body-limit", &LIMIT.to_string()], &[]);
    let mut runner = TestRunner::new(Config {
        cases: 400,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&bad_requests(), |bad| {
            let reply = send_raw(&server.addr, &addressed(&bad.raw, &server.addr));
            check_problem(&reply, &bad);
            Ok(())
        })
        .unwrap();

    // Nothing reached the store: no record, no attempt-log entry.
    let (rt, handle) = store.open();
    assert!(
        rt.block_on(handle.records().list(ListFilter::default()))
            .unwrap()
            .is_empty()
    );
    assert!(
        rt.block_on(handle.records().attempts(AttemptFilter::default()))
            .unwrap()
            .is_empty()
    );
}

fn check_problem(reply: &Reply, bad: &Bad) {
    assert_eq!(
        reply.status,
        bad.status,
        "{} {:?}: {}",
        bad.path,
        String::from_utf8_lossy(&bad.raw),
        reply.text()
    );
    let p = reply.problem(bad.status);
    if let Some(names) = &bad.names {
        let detail = p["detail"].as_str().unwrap();
        assert!(
            detail.contains(names.as_str()),
            "{} {:?}: the detail does not name {names}: {p}",
            bad.path,
            String::from_utf8_lossy(&bad.raw)
        );
    }
}

#[test]
fn stale_and_unknown_fences_change_nothing() {
    let store = TestStore::sqlite();
    let server = Server::start(&store.url, &[], &[]);
    let begun = server.ok("/v1/begin", &json!({"operation": op("i1", "100")}));
    let key = begun["key"].as_str().unwrap().to_string();
    let fence = begun["fence"].as_u64().unwrap();
    let writes = (
        0..3usize,
        (0..=i64::MAX as u64).prop_filter("not the live fence", move |f| *f != fence),
        proptest::collection::vec(any::<u8>(), 32),
        any::<bool>(),
    );
    let mut runner = TestRunner::new(Config {
        cases: 150,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&writes, |(route, f, other_key, known)| {
            let k = if known { key.clone() } else { hex(&other_key) };
            let (path, body) = match route {
                0 => (
                    "/v1/complete",
                    json!({"key": k, "fence": f, "body": "forged"}),
                ),
                1 => (
                    "/v1/fail",
                    json!({"key": k, "fence": f, "retryable": false}),
                ),
                _ => (
                    "/v1/heartbeat",
                    json!({"key": k, "fence": f, "lease_ms": 60000}),
                ),
            };
            let reply = server.post(path, &body);
            if known {
                let p = reply.problem(409);
                assert_eq!(p["fence"], f);
                assert!(
                    p["detail"]
                        .as_str()
                        .unwrap()
                        .contains(&format!("fence {f}"))
                );
            } else {
                let p = reply.problem(404);
                assert_eq!(p["key"], k.as_str());
            }
            Ok(())
        })
        .unwrap();

    // The live claim is as begin left it, and its holder can still finish.
    let (rt, handle) = store.open();
    let records = rt
        .block_on(handle.records().list(ListFilter::default()))
        .unwrap();
    assert_eq!(records.len(), 1);
    let record = &records[0].record;
    assert_eq!(
        (record.state, record.fence, record.attempts, &record.outcome),
        (RecordState::InProgress, fence, 1, &None)
    );
    server.ok(
        "/v1/complete",
        &json!({"key": key, "fence": fence, "body": "receipt"}),
    );
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
