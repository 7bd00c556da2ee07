//! Who, in words: clients of `idem serve` name themselves, and `idem
//! report` tells a client killed mid-effect, a client's retry and a re-run
//! by hand apart, naming each by the caller's name rather than the
//! sidecar's process. The clients are real processes of the Python client
//! package (standard library only), each with its default name
//! (`billing-job@host:pid`) or one its user gave it (`$IDEM_CALLER`).

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use idem_tests::{TestStore, idem_bin, tool_available, workspace_root};
use serde_json::{Value, json};

use crate::serve::Server;

/// The client: begins the operation in argv[2]; `hang` then sleeps as if
/// its effect ran (the test kills it there); `twice` completes and begins
/// again, as a client whose answer was lost; `once` completes (or prints
/// what a duplicate got). One line per answer: `answer key`.
const CLIENT: &str = r#"
import json, sys, time
from idem_client import IdemClient, ExecuteAnswer
client = IdemClient(sys.argv[1])
op, mode = json.loads(sys.argv[2]), sys.argv[3]
def ask():
    answer = client.begin(op)
    print(answer.answer, getattr(answer, "key", ""), flush=True)
    return answer
first = ask()
if mode == "hang":
    time.sleep(600)
if isinstance(first, ExecuteAnswer):
    client.complete(first.key, first.fence, body="receipt")
if mode == "twice":
    ask()
"#;

/// The lease the server gives each claim: the killed client's lapses.
const LEASE: Duration = Duration::from_secs(2);

fn charge(invoice: &str, run: Option<Value>) -> Value {
    let mut op = json!({
        "kind": "charge", "tenant": "acme",
        "fields": {"customer": "c1", "billing_period": "2026-12", "invoice_id": invoice,
                   "amount": "100", "currency": "EUR"},
    });
    if let Some(run) = run {
        op["run"] = run;
    }
    op
}

/// Starts the client (`billing-job.py`) on `op` in `mode`, with `env`.
fn client(
    dir: &std::path::Path,
    server: &Server,
    op: &Value,
    mode: &str,
    env: &[(&str, &str)],
) -> Child {
    let script = dir.join("billing-job.py");
    std::fs::write(&script, CLIENT).unwrap();
    Command::new("python3")
        .arg(&script)
        .args([&format!("http://{}", server.addr), &op.to_string(), mode])
        .env("PYTHONPATH", workspace_root().join("clients/python/src"))
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env_remove("IDEM_CALLER")
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 starts")
}

/// The client's answers (`answer key` lines) once it has exited.
fn answers(child: Child) -> Vec<(String, String)> {
    let out = child.wait_with_output().expect("the client runs");
    assert!(out.status.success(), "the client failed: {out:?}");
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let (a, k) = l.split_once(' ').unwrap_or((l, ""));
            (a.to_string(), k.to_string())
        })
        .collect()
}

fn host_name() -> String {
    let out = Command::new("python3")
        .args(["-c", "import socket; print(socket.gethostname())"])
        .output()
        .expect("python3 runs");
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

#[test]
fn a_client_killed_mid_effect_its_retry_and_a_re_run_by_hand_are_each_named_in_the_report() {
    let test =
        "a_client_killed_mid_effect_its_retry_and_a_re_run_by_hand_are_each_named_in_the_report";
    if !tool_available(test, "python3") {
        return;
    }
    let store = TestStore::sqlite();
    let server = Server::start(&store.store, &["--lease", "2s"], &[]);
    let dir = store.dir.path();
    let who = |child: &Child| format!("billing-job@{}:{}", host_name(), child.id());

    // 1. A client claims invoice R-1 and is killed mid-effect; once its
    // lease lapsed, the same service, restarted, asks again.
    let crash = charge("R-1", None);
    let mut killed = client(dir, &server, &crash, "hang", &[]);
    let killed_name = who(&killed);
    let mut line = String::new();
    BufReader::new(killed.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.starts_with("execute "), "{line}");
    let crash_key = line.trim().split_once(' ').unwrap().1.to_string();
    killed.kill().unwrap();
    killed.wait().unwrap();
    std::thread::sleep(LEASE + Duration::from_millis(1_000));
    let restarted = client(dir, &server, &crash, "once", &[]);
    let restarted_name = who(&restarted);
    assert_eq!(answers(restarted)[0].0, "rejected", "sent to review");

    // 2. A client completes invoice R-2 and asks again (its answer lost).
    let retrying = client(dir, &server, &charge("R-2", None), "twice", &[]);
    let retrying_name = who(&retrying);
    let asked = answers(retrying);
    assert_eq!(asked[0].0, "execute");
    assert_eq!(asked[1].0, "replay");
    let retry_key = asked[0].1.clone();

    // 3. A client completes invoice R-3; later a person re-runs it by hand,
    // under a name of their own and a manual run.
    let first = client(dir, &server, &charge("R-3", None), "once", &[]);
    let first_name = who(&first);
    let rerun_key = answers(first)[0].1.clone();
    let manual = json!({"run_id": "rerun-by-hand", "trigger": "manual", "attempt": 1});
    let by_hand = client(
        dir,
        &server,
        &charge("R-3", Some(manual)),
        "once",
        &[("IDEM_CALLER", "ops@bastion")],
    );
    assert_eq!(answers(by_hand)[0].0, "replay");

    let report = |json: bool| {
        let mut command = Command::new(idem_bin());
        command.args(["report", "--store", &store.store]);
        if json {
            command.arg("--json");
        }
        let out = command.output().expect("idem report runs");
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let found: Value = serde_json::from_str(&report(true)).unwrap();
    let duplicate = |key: &str| {
        found["duplicates"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["key"].as_str().unwrap().ends_with(key))
            .unwrap_or_else(|| panic!("no duplicate for {key}: {found:#}"))
            .clone()
    };
    let crashed = duplicate(&crash_key);
    let why = crashed["explanation"].as_str().unwrap();
    assert_eq!(crashed["cause"], "take-over-after-pause", "{why}");
    assert!(
        why.starts_with(&format!("{killed_name} started it at fence 1"))
            && why.contains(&format!("{restarted_name} asked"))
            && why.contains("sent to review"),
        "{why}"
    );
    assert_eq!(crashed["runs"], json!([killed_name, restarted_name]));

    let retried = duplicate(&retry_key);
    let why = retried["explanation"].as_str().unwrap();
    assert_eq!(retried["cause"], "client-retry", "{why}");
    assert!(
        why.contains(&format!("{retrying_name} asked again")),
        "{why}"
    );
    assert_eq!(retried["runs"], json!([retrying_name]));

    let rerun = duplicate(&rerun_key);
    let why = rerun["explanation"].as_str().unwrap();
    assert_eq!(rerun["cause"], "manual-rerun", "{why}");
    assert!(
        why.contains(&first_name) && why.contains("rerun-by-hand (ops@bastion)"),
        "{why}"
    );

    // The text names them too, never the sidecar's own process.
    let text = report(false);
    for name in [&killed_name, &restarted_name, &retrying_name, &first_name] {
        assert!(text.contains(name.as_str()), "{name} in:\n{text}");
    }
    // (A pid that merely starts with the sidecar's digits is another.)
    let sidecar = format!(":{}", server.pid());
    assert!(
        text.match_indices(&sidecar)
            .all(|(at, m)| text[at + m.len()..].starts_with(|c: char| c.is_ascii_digit())),
        "the sidecar's pid in:\n{text}"
    );
}
