//! One run loop under `idem run` and `idem consume` (issue 45): the same
//! operations, each meeting a different answer, through an ops file and
//! through a broker, end the same — the same records, the same summary
//! counts — and the broker's source settles each its own way (the conflict
//! terminated, the rest acknowledged).

use std::path::Path;
use std::process::Command;

use idem_tests::{idem_bin, policy_path};

use super::{Broker, charge, consume, summary};

/// A charge of `invoice` for `amount`.
fn charge_of(invoice: &str, amount: &str) -> String {
    charge(invoice).replace(r#""amount":"100""#, &format!(r#""amount":"{amount}""#))
}

/// The effect: a charge whose invoice starts with `F` fails for good
/// (status 3, listed permanent); the rest succeed.
/// The operation is read whole first: a command that stops reading early
/// would race idem's write of it.
const EFFECT: &str = r#"op=$(cat); case "$op" in *'"invoice_id":"F'*) exit 3 ;; esac"#;

/// Each record of the store in `dir`: its key, state and status, sorted.
fn records(dir: &Path) -> Vec<(String, String, String)> {
    let listed = idem_tests::passes(
        "idem inspect",
        Command::new(idem_bin())
            .args(["inspect", "--json", "--store"])
            .arg(format!("sqlite:{}", dir.join("idem.db").display())),
    );
    let listed: serde_json::Value =
        serde_json::from_str(&listed).unwrap_or_else(|e| panic!("{e}: {listed}"));
    let mut records: Vec<_> = listed
        .as_array()
        .expect("a list of records")
        .iter()
        .map(|r| {
            (
                r["key"].to_string(),
                r["state"].to_string(),
                r["outcome"]["status"].to_string(),
            )
        })
        .collect();
    records.sort();
    records
}

/// The counts both faces print, from a summary.
fn counts(summary: &serde_json::Value) -> Vec<(&'static str, u64)> {
    [
        "executed",
        "replayed",
        "conflicts",
        "failed",
        "refused",
        "not_run",
    ]
    .into_iter()
    .map(|field| (field, summary[field].as_u64().unwrap_or_default()))
    .collect()
}

/// Two passes, so that a duplicate meets a record already ended (within
/// one pass it may meet its first copy still in progress).
const PASSES: [[(&str, &str); 3]; 2] = [
    // executed; failed for good; executed
    [("S-1", "100"), ("F-1", "100"), ("S-2", "100")],
    // replayed; a conflict (the same invoice, another amount); the
    // failure replayed
    [("S-1", "100"), ("S-1", "250"), ("F-1", "100")],
];

/// `idem run` over `ops` in `dir`: its summary.
fn run_file(dir: &Path, ops: &[String]) -> serde_json::Value {
    std::fs::write(dir.join("ops.jsonl"), ops.join("\n") + "\n").unwrap();
    let ran = Command::new(idem_bin())
        .args(["run", "--policy"])
        .arg(policy_path("billing-charge"))
        .args(["--store", "sqlite:idem.db", "--ops", "ops.jsonl"])
        .args([
            "--permanent-exit-codes",
            "3",
            "--json",
            "--",
            "sh",
            "-c",
            EFFECT,
        ])
        .current_dir(dir)
        .env("IDEM_CACHE_DIR", dir.join("cache"))
        .output()
        .unwrap();
    summary(&ran)
}

pub(super) fn a_file_and_a_broker_give_each_operation_the_same_end(broker: &dyn Broker) {
    let (file, messages) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (file, messages) = (file.path(), messages.path());
    let mut ran = Vec::new();
    let mut consumed = Vec::new();
    for pass in PASSES {
        let ops: Vec<String> = pass.iter().map(|(i, a)| charge_of(i, a)).collect();
        ran.push(run_file(file, &ops));
        broker.publish(&ops);
        let out = consume(
            broker,
            messages,
            "same",
            &["--permanent-exit-codes", "3", "--stop-when-idle", "2s"],
            EFFECT,
        )
        .output()
        .unwrap();
        consumed.push(summary(&out));
    }
    let total = |summaries: &[serde_json::Value]| {
        let mut total = counts(&summaries[0]);
        for (field, n) in &mut total {
            *n += summaries[1][*field].as_u64().unwrap_or_default();
        }
        total
    };
    let expected = vec![
        ("executed", 2),
        ("replayed", 1),
        ("conflicts", 1),
        ("failed", 2),
        ("refused", 0),
        ("not_run", 0),
    ];
    assert_eq!(total(&ran), expected, "idem run: {ran:?}");
    assert_eq!(total(&consumed), expected, "idem consume: {consumed:?}");
    let (from_file, from_broker) = (records(file), records(messages));
    assert_eq!(from_file.len(), 3, "{from_file:?}");
    assert_eq!(from_file, from_broker, "the same records either way");
    // The broker's own settle: the conflict refused for good, every other
    // delivery acknowledged.
    assert_eq!(broker.refused("same"), vec![charge_of("S-1", "250")]);
    assert_eq!(broker.unsettled("same"), 0);
}
