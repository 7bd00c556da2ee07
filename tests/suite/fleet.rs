//! Many machines, simulated here: 8 worker processes run `idem run` over the
//! same operations against one PostgreSQL, while a chaos thread pauses them
//! (SIGSTOP past the lease, then SIGCONT) and kills one mid-run. Every
//! effect is appended to a per-worker ledger with the key and fence it
//! carried. Afterwards: no operation ran twice, every completed record has
//! exactly its one effect, and every stale completion was fenced.

use std::collections::HashMap;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use idem_tests::{idem_bin, policy_path, postgres_url};

const WORKERS: usize = 8;

fn ops_count() -> usize {
    std::env::var("IDEM_FLEET_OPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000)
}

/// A small seeded generator (xorshift64*): the chaos schedule is replayable.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

/// The operations (by index) whose records worker `w` holds in progress.
fn held_by(url: &str, schema: &str, w: usize) -> Vec<usize> {
    let sql = format!(
        "SELECT partition FROM {schema}.records WHERE state = 'in-progress' AND holder_run_id = 'worker-{w}'"
    );
    let out = Command::new("psql")
        .args([url, "-At", "-c", &sql])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.strip_prefix('c')?.parse().ok())
        .collect()
}

fn signal(pid: u32, sig: &str) {
    let _ = Command::new("kill").args([sig, &pid.to_string()]).status();
}

fn ledger(dir: &std::path::Path, worker: usize) -> Vec<(String, u64)> {
    let name = if worker == usize::MAX {
        "ledger-operator".to_string()
    } else {
        format!("ledger-{worker}")
    };
    std::fs::read_to_string(dir.join(name))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let (key, fence) = l.split_once(' ')?;
            Some((key.to_string(), fence.parse().ok()?))
        })
        .collect()
}

#[test]
fn a_fleet_of_workers_executes_every_op_once_and_fences_stale_completions() {
    let Some(url) = postgres_url("fleet") else {
        return;
    };
    let seed: u64 = std::env::var("IDEM_FLEET_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0x1DE3);
    eprintln!(
        "fleet: seed {seed} (replay with IDEM_FLEET_SEED={seed}), {} ops",
        ops_count()
    );
    let dir = tempfile::tempdir().unwrap();
    let schema = format!("idem_fleet_{}", std::process::id());
    let store = format!(
        "{url}{}idem_schema={schema}",
        if url.contains('?') { '&' } else { '?' }
    );
    let n = ops_count();
    let ops: Vec<String> = (0..n)
        .map(|i| {
            format!(
                r#"{{"kind":"charge","tenant":"acme","fields":{{"customer":"c{i}","billing_period":"2026-11","invoice_id":"i{i}","amount":"{}","currency":"EUR"}}}}"#,
                100 + i % 50
            )
        })
        .collect();
    // Each worker gets the same operations in its own (seeded) order, so a
    // paused worker's claims are soon reached by the others.
    let mut rng = Rng(seed | 1);
    let ops_paths: Vec<_> = (0..WORKERS)
        .map(|w| {
            let mut order = ops.clone();
            for i in (1..order.len()).rev() {
                order.swap(i, (rng.next() % (i as u64 + 1)) as usize);
            }
            let path = dir.path().join(format!("ops-{w}.jsonl"));
            std::fs::write(&path, order.join("\n") + "\n").unwrap();
            path
        })
        .collect();
    let policy = policy_path("billing-charge");

    let mut workers: Vec<Child> = (0..WORKERS)
        .map(|w| {
            Command::new(idem_bin())
                .args([
                    "run",
                    "--policy",
                    policy.to_str().unwrap(),
                    "--store",
                    &store,
                    "--ops",
                ])
                .arg(&ops_paths[w])
                .args([
                    "--concurrency",
                    "4",
                    "--lease",
                    "1s",
                    "--json",
                    "--run-id",
                    &format!("worker-{w}"),
                ])
                .args([
                    "--",
                    "sh",
                    "-c",
                    r#"echo "$IDEM_KEY $IDEM_FENCE" >> "$LEDGER""#,
                ])
                .env("LEDGER", dir.path().join(format!("ledger-{w}")))
                .env("IDEM_CACHE_DIR", dir.path().join("cache"))
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();

    // Chaos: pause a random worker past its lease, again and again; kill
    // the last one once a quarter of the work is done.
    let victim = WORKERS - 1;
    let mut killed = false;
    let mut pauses = 0;
    let mut reviewed = 0u64;
    loop {
        let alive: Vec<usize> = (0..WORKERS)
            .filter(|&w| !(killed && w == victim) && workers[w].try_wait().unwrap().is_none())
            .collect();
        if alive.is_empty() {
            break;
        }
        let done: usize = (0..WORKERS).map(|w| ledger(dir.path(), w).len()).sum();
        if !killed && done >= n / 4 {
            workers[victim].kill().unwrap();
            killed = true;
            continue;
        }
        let w = alive[(rng.next() % alive.len() as u64) as usize];
        let pid = workers[w].id();
        signal(pid, "-STOP");
        pauses += 1;
        // Fault injection, not an assertion: longer than the 1 s lease.
        std::thread::sleep(Duration::from_millis(1_500));
        // While it is stalled, an operator re-runs by hand the operations
        // it holds: their leases expired, so the policy sends them to review
        // (outcome-unknown) instead of charging again.
        for i in held_by(&url, &schema, w).into_iter().take(2) {
            let op = dir.path().join("manual-op.json");
            std::fs::write(&op, &ops[i]).unwrap();
            let out = Command::new(idem_bin())
                .args([
                    "exec",
                    "--policy",
                    policy.to_str().unwrap(),
                    "--store",
                    &store,
                    "--op",
                ])
                .arg(&op)
                .args([
                    "--run-id",
                    "operator",
                    "--trigger",
                    "manual",
                    "--",
                    "sh",
                    "-c",
                ])
                .arg(r#"echo "$IDEM_KEY $IDEM_FENCE" >> "$LEDGER""#)
                .env("LEDGER", dir.path().join("ledger-operator"))
                .env("IDEM_CACHE_DIR", dir.path().join("cache"))
                .output()
                .unwrap();
            // 77: rejected and marked outcome-unknown; 0: it had finished
            // meanwhile and was replayed. Never executed again.
            assert!(
                matches!(out.status.code(), Some(77) | Some(0)),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            reviewed += u64::from(out.status.code() == Some(77));
        }
        signal(pid, "-CONT");
        std::thread::sleep(Duration::from_millis(200 + rng.next() % 400));
    }
    assert!(
        killed,
        "the run ended before a worker could be killed; raise IDEM_FLEET_OPS"
    );

    // What each surviving worker says it did.
    let mut summaries = HashMap::new();
    for (w, child) in workers.into_iter().enumerate() {
        let out = child.wait_with_output().unwrap();
        if w == victim {
            continue;
        }
        let text = String::from_utf8_lossy(&out.stdout);
        let summary: serde_json::Value = serde_json::from_str(text.trim())
            .unwrap_or_else(|e| panic!("worker {w} printed no summary ({e}): {text}"));
        summaries.insert(w, summary);
    }

    // What the store holds.
    let out = Command::new(idem_bin())
        .args([
            "inspect",
            "--json",
            "--limit",
            &(n * 2).to_string(),
            "--store",
            &store,
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let records: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    let _ = Command::new("psql")
        .args([&url, "-q", "-c", &format!("DROP SCHEMA {schema} CASCADE")])
        .output();

    let mut effects: HashMap<String, Vec<(usize, u64)>> = HashMap::new();
    assert!(ledger(dir.path(), usize::MAX).is_empty());
    for w in 0..WORKERS {
        for (key, fence) in ledger(dir.path(), w) {
            effects.entry(key).or_default().push((w, fence));
        }
    }
    // 1. No operation's effect happened twice, whatever the pauses and the kill.
    let twice: Vec<_> = effects.iter().filter(|(_, e)| e.len() > 1).collect();
    assert!(
        twice.is_empty(),
        "seed {seed}: effects ran twice: {twice:?}"
    );
    // 2. Every operation has a record; every completed record has exactly its
    //    one effect, under the fence it completed with.
    assert_eq!(records.len(), n, "seed {seed}");
    let mut stale = 0u64;
    for r in &records {
        let key = r["key"].as_str().unwrap();
        let fence = r["fence"].as_u64().unwrap();
        match r["state"].as_str().unwrap() {
            "completed" => {
                let e = effects
                    .get(key)
                    .unwrap_or_else(|| panic!("seed {seed}: completed without effect: {r}"));
                assert_eq!(
                    e[0].1, fence,
                    "seed {seed}: completed under another fence: {r}"
                );
            }
            // Sent to review after a holder's lease expired, or claimed by
            // the killed worker: at most one effect (checked above).
            "outcome-unknown" | "in-progress" => {
                if let Some(e) = effects.get(key)
                    && e[0].0 != victim
                {
                    stale += 1;
                }
            }
            other => panic!("seed {seed}: unexpected state {other}: {r}"),
        }
    }
    // 3. Every stale completion was fenced: each effect a surviving worker
    //    made whose record went to review is one of its fenced writes.
    let fenced: u64 = summaries
        .values()
        .map(|s| s["fenced"].as_u64().unwrap())
        .sum();
    // A worker stalled inside a transaction has its session ended by the
    // server (idle-in-transaction timeout), so its call fails when it wakes:
    // counted as `unknown`, never as done.
    let unknown: u64 = summaries
        .values()
        .map(|s| s["unknown"].as_u64().unwrap())
        .sum();
    assert!(
        fenced <= stale && stale <= fenced + unknown,
        "seed {seed}: stale completions {stale}, fenced writes {fenced}, unknown {unknown}"
    );
    assert!(
        reviewed > 0,
        "seed {seed}: no pause caught a worker holding a claim; the test proved nothing"
    );
    // 4. Each survivor accounted for every operation and every effect.
    for (w, s) in &summaries {
        let total: u64 = [
            "executed",
            "replayed",
            "in_progress",
            "conflicts",
            "rejected",
            "failed",
            "fenced",
            "unknown",
            "stale_epoch",
            "not_owned",
        ]
        .iter()
        .map(|k| s[*k].as_u64().unwrap())
        .sum();
        assert_eq!(total as usize, n, "seed {seed}: worker {w}: {s}");
        let runs = s["executed"].as_u64().unwrap()
            + s["fenced"].as_u64().unwrap()
            + s["failed"].as_u64().unwrap();
        let effects = ledger(dir.path(), *w).len() as u64;
        assert!(
            runs <= effects && effects <= runs + s["unknown"].as_u64().unwrap(),
            "seed {seed}: worker {w}: {effects} effects: {s}"
        );
    }
    eprintln!(
        "fleet: {pauses} pauses, {reviewed} claims sent to review during pauses, {stale} stale completions fenced, {} records",
        records.len()
    );
}
