//! Issue 42's checks, through each broker (`nats.rs`, `amqp.rs`): every
//! message has one fate, decided once.
//! - poison of every kind beside good charges: each good one charged once,
//!   each bad one terminated once (RabbitMQ: dead-lettered) with one line,
//!   and the consumer stops when idle; on SQLite and PostgreSQL;
//! - `--run-id/--trigger/--attempt` reach the records of the operations
//!   that name no run of their own;
//! - `--stop-when-idle` right after a crash waits for the deliveries the
//!   crashed consumer held, and runs them;
//! - a duplicate of a record waiting in review is acknowledged.

use std::process::{Command, Output};
use std::time::{Duration, Instant};

use idem_tests::{TestStore, idem_bin};

use super::{APPEND, Broker, charge, consume_on, effects_of, spawn_group, summary};

/// `command`'s output, once it exits; a consumer that is still running
/// after two minutes (it never stopped when idle) is killed and fails the
/// test.
pub(super) fn output_within(mut command: Command, what: &str) -> Output {
    use std::os::unix::process::CommandExt;
    let mut child = command
        .process_group(0)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if Instant::now() > deadline {
            super::kill_group(&mut child);
            panic!("{what}: still running after two minutes");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

/// A charge whose field `name` is `value` (already JSON-escaped).
fn charge_with(invoice: &str, name: &str, value: &str) -> String {
    charge(invoice).replace(
        &format!(r#""{name}":"#),
        &format!(r#""{name}":{value},"was_{name}":"#),
    )
}

/// The poison: each kind of message refused for good, and what the
/// summary counts it as.
fn poison() -> Vec<(&'static str, String, &'static str)> {
    // Below NATS's 1 MiB payload limit with the rest of the charge, and
    // far above the 64 KiB an operation may be.
    let big = "x".repeat(1024 * 1024 - 1024);
    vec![
        ("not JSON", "not json {".to_string(), "refused"),
        (
            "not an operation",
            r#"{"hello":"world"}"#.to_string(),
            "refused",
        ),
        (
            "an unknown kind",
            charge("u1").replace(r#""kind":"charge""#, r#""kind":"refund""#),
            "refused",
        ),
        (
            "a missing field",
            charge("u2").replace(r#","invoice_id":"u2""#, ""),
            "refused",
        ),
        (
            "a bad value",
            charge("u3").replace(r#""currency":"EUR""#, r#""currency":"euro""#),
            "refused",
        ),
        (
            "a conflict",
            charge("p0").replace(r#""amount":"100""#, r#""amount":"999""#),
            "conflicts",
        ),
        (
            "a NUL",
            charge("u4").replace(r#""invoice_id":"u4""#, r#""invoice_id":"u\u0000 4""#),
            "refused",
        ),
        (
            "a 1 MiB field",
            charge_with("u5", "customer", &format!("\"{big}\"")),
            "refused",
        ),
    ]
}

pub(super) fn poison_is_refused_once_beside_good_charges(broker: &dyn Broker, store: &TestStore) {
    let dir = tempfile::tempdir().unwrap();
    const GOOD: usize = 10;
    let mut bodies: Vec<String> = (0..GOOD).map(|i| charge(&format!("p{i}"))).collect();
    let poison = poison();
    bodies.extend(poison.iter().map(|(_, body, _)| body.clone()));
    broker.publish(&bodies);
    let out = output_within(
        consume_on(
            broker,
            dir.path(),
            &store.store,
            "billing",
            &["--concurrency", "2", "--stop-when-idle", "2s"],
            APPEND,
        ),
        "the consumer fed poison",
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let tally = summary(&out);
    let refused = poison.iter().filter(|p| p.2 == "refused").count() as u64;
    assert_eq!(
        (
            tally["executed"].as_u64(),
            tally["refused"].as_u64(),
            tally["conflicts"].as_u64(),
            tally["not_run"].as_u64(),
            tally["failed"].as_u64(),
        ),
        (Some(GOOD as u64), Some(refused), Some(1), Some(0), Some(0)),
        "{tally}; {stderr}"
    );
    // Each good charge made once, and nothing else.
    for i in 0..GOOD {
        assert_eq!(effects_of(dir.path(), &format!("p{i}")), 1, "invoice p{i}");
    }
    let ledger = std::fs::read_to_string(dir.path().join("ledger")).unwrap_or_default();
    assert_eq!(ledger.lines().filter(|l| !l.is_empty()).count(), GOOD);
    // One line per bad message, each saying it was terminated; none put
    // off, and nothing of a message's reaches the terminal raw.
    let terminated: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("terminated"))
        .collect();
    assert_eq!(terminated.len(), poison.len(), "{stderr}");
    assert!(
        !stderr.contains("put off") && !stderr.contains("not run"),
        "{stderr}"
    );
    assert!(!stderr.contains('\0'), "a NUL reached the terminal");
    assert!(
        stderr.lines().all(|l| l.len() < 4096),
        "a 1 MiB field was echoed: {} bytes",
        stderr.len()
    );
    // The broker holds nothing unsettled, and says it was told each bad
    // message's fate once (RabbitMQ: its dead-letter queue has each).
    assert_eq!(broker.unsettled("billing"), 0, "every message settled");
    let mut refused_bodies = broker.refused("billing");
    refused_bodies.sort();
    let mut expected: Vec<String> = poison.iter().map(|(_, body, _)| body.clone()).collect();
    expected.sort();
    assert!(
        refused_bodies == expected,
        "refused by the broker: {:?}",
        refused_bodies
            .iter()
            .map(|b| b.chars().take(80).collect::<String>())
            .collect::<Vec<_>>()
    );
}

/// The run of the record of `invoice`, as `idem inspect --json` shows its
/// holder: (run id, trigger, attempt).
fn run_of(store: &str, invoice: &str) -> (String, String, u64) {
    let out = Command::new(idem_bin())
        .args(["inspect", "--json", "--store", store])
        .output()
        .unwrap();
    let listed: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    let needle = format!("\"invoice_id\":\"{invoice}\"");
    let record = listed
        .as_array()
        .expect("a list")
        .iter()
        .find(|r| {
            r["operation"]
                .to_string()
                .replace("\\\"", "\"")
                .contains(&needle)
        })
        .unwrap_or_else(|| panic!("no record of {invoice} in {listed}"));
    let holder = &record["holder"];
    (
        holder["run_id"].as_str().unwrap_or_default().to_string(),
        holder["trigger"].as_str().unwrap_or_default().to_string(),
        holder["attempt"].as_u64().unwrap_or_default(),
    )
}

pub(super) fn the_run_flags_reach_the_records(broker: &dyn Broker) {
    let dir = tempfile::tempdir().unwrap();
    let store = TestStore::sqlite();
    let own_run = charge("r2").replace(
        r#""fields""#,
        r#""run":{"run_id":"publisher-9","trigger":"client","attempt":3},"fields""#,
    );
    broker.publish(&[charge("r1"), own_run]);
    let out = output_within(
        consume_on(
            broker,
            dir.path(),
            &store.store,
            "billing",
            &[
                "--run-id",
                "consume-7",
                "--trigger",
                "retry",
                "--attempt",
                "2",
                "--stop-when-idle",
                "2s",
            ],
            APPEND,
        ),
        "the consumer",
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(summary(&out)["executed"], 2);
    assert_eq!(
        run_of(&store.store, "r1"),
        ("consume-7".into(), "retry".into(), 2)
    );
    // A run the publisher named is its own.
    assert_eq!(
        run_of(&store.store, "r2"),
        ("publisher-9".into(), "client".into(), 3)
    );
}

pub(super) fn stopping_when_idle_after_a_crash_runs_what_the_crashed_consumer_held(
    broker: &dyn Broker,
    redeliver_after: &[&str],
) {
    let dir = tempfile::tempdir().unwrap();
    let store = TestStore::sqlite();
    let bodies: Vec<String> = (0..4).map(|i| charge(&format!("c{i}"))).collect();
    broker.publish(&bodies);
    // The first consumer charges c1, then hangs and is killed, holding it.
    let stall = format!(
        r#"{APPEND}; case "$(tail -n 2 "$LEDGER")" in *'"invoice_id":"c1"'*) sleep 600 ;; esac"#
    );
    let mut flags = vec!["--lease", "1s"];
    flags.extend(redeliver_after);
    let mut first = spawn_group(consume_on(
        broker,
        dir.path(),
        &store.store,
        "billing",
        &flags,
        &stall,
    ));
    let deadline = Instant::now() + Duration::from_secs(60);
    while effects_of(dir.path(), "c1") == 0 {
        assert!(Instant::now() < deadline, "c1 was never charged");
        std::thread::sleep(Duration::from_millis(50));
    }
    super::kill_group(&mut first);
    // Idle for a second is well before the broker gives c1 back: the
    // consumer waits for it.
    let out = output_within(
        consume_on(
            broker,
            dir.path(),
            &store.store,
            "billing",
            &["--lease", "1s", "--stop-when-idle", "1s"],
            APPEND,
        ),
        "the consumer after a crash",
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let tally = summary(&out);
    assert_eq!(
        tally["sent_to_review"], 1,
        "c1 came back: {tally}; {stderr}"
    );
    assert_eq!(broker.unsettled("billing"), 0, "nothing left: {stderr}");
    for i in 0..4 {
        assert_eq!(effects_of(dir.path(), &format!("c{i}")), 1, "invoice c{i}");
    }
    // A duplicate of c1, whose record waits in review, is acknowledged
    // (on both brokers alike) with a line, never refused.
    broker.publish(&[charge("c1")]);
    let again = output_within(
        consume_on(
            broker,
            dir.path(),
            &store.store,
            "billing",
            &["--stop-when-idle", "1s"],
            APPEND,
        ),
        "the consumer of the duplicate",
    );
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert_eq!(again.status.code(), Some(0), "{stderr}");
    assert_eq!(summary(&again)["rejected"], 1, "{stderr}");
    assert!(
        stderr.contains("waits in review") && stderr.contains("acknowledged"),
        "{stderr}"
    );
    assert_eq!(broker.unsettled("billing"), 0);
    assert!(broker.refused("billing").is_empty(), "not refused");
    assert_eq!(effects_of(dir.path(), "c1"), 1);
}

#[test]
fn a_run_id_an_operation_could_not_carry_is_refused_naming_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("idem.db");
    let long = "r".repeat(300);
    for bad in [long.as_str(), "a\u{1b}[2Jb", "one\nidem: forged", ""] {
        for face in [
            &[
                "consume",
                "--from",
                "nats://127.0.0.1:1",
                "--stream",
                "S",
                "--consumer",
                "c",
            ][..],
            &["run", "--ops", "ops.jsonl"][..],
        ] {
            let out = Command::new(idem_bin())
                .args(face)
                .arg("--policy")
                .arg(idem_tests::policy_path("billing-charge"))
                .arg("--store")
                .arg(format!("sqlite:{}", store.display()))
                .args(["--run-id", bad, "--", "true"])
                .current_dir(dir.path())
                .env("IDEM_CACHE_DIR", dir.path().join("cache"))
                .output()
                .unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{face:?} {bad:?}: {stderr}");
            assert!(stderr.contains("--run-id"), "{face:?} {bad:?}: {stderr}");
            assert!(
                !stderr.contains('\u{1b}') && !stderr.contains("\nidem: forged"),
                "{stderr}"
            );
            assert!(!store.exists(), "{face:?}: nothing was opened");
        }
    }
    // 256 bytes is an operation's own limit: accepted (the store is then
    // opened; the broker is not there).
    let out = Command::new(idem_bin())
        .args(["run", "--ops", "-", "--policy"])
        .arg(idem_tests::policy_path("billing-charge"))
        .arg("--store")
        .arg(format!("sqlite:{}", store.display()))
        .args(["--run-id", &"r".repeat(256), "--json", "--", "true"])
        .env("IDEM_CACHE_DIR", dir.path().join("cache"))
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
