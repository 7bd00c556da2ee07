//! What a run asks of the store, counted from its metrics file
//! (`--metrics-file`): a re-run of what is done writes nothing, and a lone
//! worker commits once per operation. On SQLite and on PostgreSQL.

use std::process::Output;

use super::{Env, charge, charges, summary};

on_every_store!(
    a_rerun_of_what_is_done_claims_nothing,
    a_lone_worker_commits_once_per_operation,
);

/// How many store calls of `call` a metrics file counts (0 when none).
fn store_calls(metrics: &str, call: &str) -> u64 {
    let prefix = format!("idem_store_call_seconds_count{{call=\"{call}\"}} ");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map_or(0, |n| n.trim().parse().unwrap())
}

/// `idem run --json --metrics-file NAME -- true` of `ops`: its output and
/// the metrics file's text.
fn run_with_metrics(env: &Env, ops: &str, name: &str, args: &[&str]) -> (Output, String) {
    let metrics = env.path(name);
    let out = env
        .run(
            "billing-charge",
            ops,
            &[
                args,
                &["--json", "--metrics-file", metrics.to_str().unwrap()],
                &["--", "true"],
            ]
            .concat(),
        )
        .output()
        .unwrap();
    let text = std::fs::read_to_string(&metrics)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    (out, text)
}

/// A re-run where every operation is done settles them from one read per
/// batch (`Records::get_many`), with no claim: no slot waits, no lease
/// runs. Where one operation is not done, only that one is claimed.
fn a_rerun_of_what_is_done_claims_nothing(env: Env) {
    let ops = env.write("ops.jsonl", &charges(150));
    let ops = ops.to_str().unwrap();
    let first = env
        .run("billing-charge", ops, &["--json", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(summary(&first)["executed"], 150);
    let (again, text) = run_with_metrics(&env, ops, "again.prom", &[]);
    assert_eq!(summary(&again)["replayed"], 150, "{}", text);
    // No write at all (a group commit would carry a claim as write_many).
    for write in ["claim", "claim_many", "write_many", "finish", "finish_many"] {
        assert_eq!(store_calls(&text, write), 0, "{write}:\n{text}");
    }
    // 150 operations in reads of at most --claim-batch (64) each.
    let reads = store_calls(&text, "get_many");
    assert!((3..=150).contains(&reads), "{reads} reads:\n{text}");
    // One more operation, new: claimed alone; the rest replay unclaimed.
    let more = env.write(
        "more.jsonl",
        &(charges(150) + &charge("c-new", "i-new") + "\n"),
    );
    let (third, text) = run_with_metrics(&env, more.to_str().unwrap(), "more.prom", &[]);
    let tally = summary(&third);
    assert_eq!(
        (tally["replayed"].as_u64(), tally["executed"].as_u64()),
        (Some(150), Some(1))
    );
    // The new one executed; the rest replayed (answered from the read).
    assert!(
        text.contains("idem_begin_total{answer=\"execute\"} 1\n"),
        "{text}"
    );
    assert!(
        text.contains("idem_begin_total{answer=\"replay\"} 150\n"),
        "{text}"
    );
}

/// A lone worker (`--concurrency 1`) records the end of each operation in
/// the store call that claims the next one and runs it in the same slot.
/// On SQLite that call is one transaction: a write call per operation (and
/// one more per batch read ahead, whose first claim and last end go alone),
/// where a claim and an end of their own would make two. On PostgreSQL the
/// two go at once on two connections (a call each). Either way each
/// operation is recorded once.
fn a_lone_worker_commits_once_per_operation(env: Env) {
    let ops = env.write("ops.jsonl", &charges(40));
    let (out, text) = run_with_metrics(
        &env,
        ops.to_str().unwrap(),
        "lone.prom",
        &["--concurrency", "1"],
    );
    assert_eq!(summary(&out)["executed"], 40, "{text}");
    let writes: u64 = ["claim", "claim_many", "finish", "finish_many", "write_many"]
        .iter()
        .map(|call| store_calls(&text, call))
        .sum();
    let reads = store_calls(&text, "get_many");
    let expected = if env.postgres {
        80..=80
    } else {
        41..=40 + reads
    };
    assert!(
        expected.contains(&writes),
        "{writes} write calls, {reads} reads ahead:\n{text}"
    );
    // Every operation recorded once, completed.
    let again = env
        .run(
            "billing-charge",
            ops.to_str().unwrap(),
            &["--json", "--", "true"],
        )
        .output()
        .unwrap();
    assert_eq!(summary(&again)["replayed"], 40);
}
