//! `idem run` as an operator runs it: long-lived workers (`--worker`, a
//! worker killed mid-operation, a worker that cannot start), bad lines named
//! and skipped (`--skip-invalid`), a policy failing on a duplicate, the
//! operations read from standard input, and two overlapping runs waiting for
//! each other (`--wait-for-peers`). On SQLite, and on PostgreSQL where the
//! store's behaviour matters.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use idem_tests::{idem_bin, policy_path, postgres_url};

/// A worker in plain sh: ready, then per request append it to the ledger
/// and answer success. It kills itself (SIGKILL) on the request for
/// invoice `i3` the first time it sees it, after recording it, so that
/// effect happened but was never answered.
const WORKER: &str = r#"
echo started >> "$STARTS"
echo '{"ready":true}'
while IFS= read -r line; do
  echo "$line" >> "$LEDGER"
  case "$line" in
    *'"invoice_id":"i3"'*) if [ ! -e "$KILLED" ]; then : > "$KILLED"; kill -9 $$; fi ;;
  esac
  echo '{"status":0,"body":"charged"}'
done
"#;

/// Each scenario below runs once per store, as in `ownership.rs`.
macro_rules! on_every_store {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(#[test]
            fn $name() {
                super::$name(super::Env::sqlite());
            })*
        }
        mod postgres {
            $(#[test]
            fn $name() {
                if let Some(env) = super::Env::postgres(stringify!($name)) {
                    super::$name(env);
                }
            })*
        }
    };
}

on_every_store!(
    workers_run_each_operation_once_and_a_killed_one_leaves_only_its_operation_unknown,
    overlapping_runs_waiting_for_peers_both_account_for_every_operation,
);

mod store_calls;

struct Env {
    dir: tempfile::TempDir,
    store: String,
    postgres: bool,
}

impl Drop for Env {
    fn drop(&mut self) {
        // A failed test must not leave a run blocked on its gate.
        let _ = std::fs::write(self.path("gate"), "");
        if self.postgres {
            idem_store_conformance::drop_postgres_schema(&self.store);
        }
    }
}

impl Env {
    fn sqlite() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let store = format!("sqlite:{}", dir.path().join("idem.db").display());
        Env {
            dir,
            store,
            postgres: false,
        }
    }

    fn postgres(test: &str) -> Option<Self> {
        let url = postgres_url(&format!("run_cli::postgres::{test}"))?;
        let sep = if url.contains('?') { '&' } else { '?' };
        let schema = idem_store_conformance::fresh_schema();
        Some(Env {
            dir: tempfile::tempdir().unwrap(),
            store: format!("{url}{sep}idem_schema={schema}&idem_pool_size=4"),
            postgres: true,
        })
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let p = self.path(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    fn lines(&self, name: &str) -> Vec<String> {
        std::fs::read_to_string(self.path(name))
            .unwrap_or_default()
            .lines()
            .map(String::from)
            .collect()
    }

    /// `idem run --policy POLICY --store STORE --ops OPS ARGS…`.
    fn run(&self, policy: &str, ops: &str, args: &[&str]) -> Command {
        let mut c = Command::new(idem_bin());
        c.args(["run", "--policy"])
            .arg(policy_path(policy))
            .args(["--store", &self.store, "--ops", ops])
            .args(args)
            .current_dir(self.dir.path())
            .env("IDEM_CACHE_DIR", self.path("cache"))
            .env("LEDGER", self.path("ledger"))
            .env("STARTS", self.path("starts"))
            .env("KILLED", self.path("killed"))
            .env("GATE", self.path("gate"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    }
}

/// `n` billing operations, one per customer, invoices `i0`…
fn charges(n: usize) -> String {
    (0..n)
        .map(|i| charge(&format!("c{i}"), &format!("i{i}")) + "\n")
        .collect()
}

fn charge(customer: &str, invoice: &str) -> String {
    format!(
        r#"{{"kind":"charge","tenant":"acme","fields":{{"customer":"{customer}","billing_period":"2026-11","invoice_id":"{invoice}","amount":"100","currency":"EUR"}}}}"#
    )
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn summary(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {} / {}", text(&out.stdout), text(&out.stderr)))
}

fn workers_run_each_operation_once_and_a_killed_one_leaves_only_its_operation_unknown(env: Env) {
    env.write("ops.jsonl", &charges(12));
    let worker = ["--worker", "--json", "--", "sh", "-c", WORKER];
    let with = |concurrency: &'static str| {
        let mut args = vec!["--concurrency", concurrency];
        args.extend(worker);
        args
    };
    let out = env
        .run("billing-charge", "ops.jsonl", &with("2"))
        .output()
        .unwrap();
    let first = summary(&out);
    // The worker died holding i3: its outcome is unknown, nothing recorded;
    // its slot started a fresh worker and every other operation ran once.
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert_eq!(first["unknown"], 1, "{first}");
    assert_eq!(first["executed"], 11, "{first}");
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("died while running the operation") && stderr.contains("signal: 9"),
        "{stderr}"
    );
    let ledger = env.lines("ledger");
    assert_eq!(ledger.len(), 12, "each operation was sent once: {ledger:?}");
    let requests: Vec<serde_json::Value> = ledger
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    for r in &requests {
        assert_eq!(r["fence"].as_u64().map(|f| f > 0), Some(true), "{r}");
        assert_eq!(r["attempt"], 1, "{r}");
        assert_eq!(r["take_over"], false, "{r}");
        assert_eq!(r["key"].as_str().map(str::len), Some(64), "{r}");
        assert_eq!(r["op"]["tenant"], "acme", "{r}");
    }
    let starts = env.lines("starts").len();
    assert!(
        (2..=3).contains(&starts),
        "two workers, and one restart after the kill (unless its slot had no more work): {starts}"
    );

    // A re-run replays what completed, starts no worker for it, and finds
    // i3 still claimed: it is never sent again blindly.
    let out = env
        .run("billing-charge", "ops.jsonl", &with("2"))
        .output()
        .unwrap();
    let again = summary(&out);
    assert_eq!(again["replayed"], 11, "{again}");
    assert_eq!(again["in_progress"], 1, "{again}");
    assert_eq!(env.lines("ledger").len(), 12);
    assert_eq!(env.lines("starts").len(), starts, "no worker was needed");
}

#[test]
fn a_worker_that_cannot_start_fails_the_operations_without_an_unknown_outcome() {
    let env = Env::sqlite();
    env.write("ops.jsonl", &charges(8));
    // Exits before saying it is ready: no operation is ever sent to it.
    let out = env
        .run(
            "billing-charge",
            "ops.jsonl",
            &[
                "--worker",
                "--json",
                "--",
                "sh",
                "-c",
                "echo broken >&2; exit 3",
            ],
        )
        .output()
        .unwrap();
    let s = summary(&out);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert_eq!(s["failed"], 8, "{s}");
    assert_eq!(s["unknown"], 0, "{s}");
    let stderr = text(&out.stderr);
    assert!(stderr.contains("exited before it was ready"), "{stderr}");
    assert!(
        stderr.contains("died 3 times in a row"),
        "the pool gave up after three deaths: {stderr}"
    );
    // Failed retryable, so a re-run with a working worker runs them all.
    let ok = r#"echo '{"ready":true}'; while read -r l; do echo '{"status":0}'; done"#;
    let out = env
        .run(
            "billing-charge",
            "ops.jsonl",
            &["--worker", "--json", "--", "sh", "-c", ok],
        )
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(summary(&out)["executed"], 8);
}

#[test]
fn a_worker_answering_outside_the_protocol_leaves_that_operation_unknown() {
    let env = Env::sqlite();
    env.write("ops.jsonl", &charges(3));
    let chatty = r#"echo '{"ready":true}'; while read -r l; do echo "charging..."; echo '{"status":0}'; done"#;
    let out = env
        .run(
            "billing-charge",
            "ops.jsonl",
            &["--worker", "--json", "--", "sh", "-c", chatty],
        )
        .output()
        .unwrap();
    let s = summary(&out);
    // Each answer is out of protocol: each worker is replaced and each
    // outcome is unknown (a protocol break is not a death, so the pool
    // never gives up here).
    assert_eq!(s["unknown"], 3, "{s}");
    assert!(
        text(&out.stderr).contains("answered `charging...`"),
        "{}",
        text(&out.stderr)
    );
}

/// A plain re-run (another process, no run id or trigger given) replays
/// everything and its closing lines say why the keys were asked for again.
#[test]
fn a_plain_rerun_says_it_is_a_rerun() {
    let env = Env::sqlite();
    let ops = env.write("ops.jsonl", &charges(3));
    let ops = ops.to_str().unwrap();
    let first = env
        .run("billing-charge", ops, &["--", "true"])
        .output()
        .unwrap();
    assert_eq!(first.status.code(), Some(0), "{}", text(&first.stderr));
    let again = env
        .run("billing-charge", ops, &["--", "true"])
        .output()
        .unwrap();
    assert_eq!(again.status.code(), Some(0), "{}", text(&again.stderr));
    let out = text(&again.stdout);
    assert!(out.contains("replayed 3"), "{out}");
    assert!(
        out.contains("why: 3 duplicates prevented: a re-run after the first run had stopped"),
        "{out}"
    );
}

#[test]
fn operations_from_standard_input_run_like_a_file() {
    let env = Env::sqlite();
    let mut child = env
        .run("billing-charge", "-", &["--json", "--", "true"])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(charges(5).as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(summary(&out)["executed"], 5);
}

#[test]
fn a_policy_failure_names_the_line_and_skip_invalid_runs_the_rest() {
    let env = Env::sqlite();
    // The misbehaving policy keys an operation by kind and tenant.
    let mut lines: Vec<String> = (0..6)
        .map(|i| format!(r#"{{"kind":"charge","tenant":"t{i}"}}"#))
        .collect();
    // Line 3: the policy traps; line 5: not JSON.
    lines[2] = r#"{"kind":"trap","tenant":"acme"}"#.into();
    lines[4] = r#"{"kind":"charge""#.into();
    env.write("ops.jsonl", &(lines.join("\n") + "\n"));
    let out = env
        .run(
            "fixture-misbehaving",
            "ops.jsonl",
            &["--", "sh", "-c", r#"echo x >> "$LEDGER""#],
        )
        .output()
        .unwrap();
    // All or nothing by default: the first bad line stops the run, named.
    assert_eq!(out.status.code(), Some(4), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("ops.jsonl line 3 `{\"kind\":\"trap\"") && stderr.contains("trap"),
        "{stderr}"
    );
    assert!(env.lines("ledger").is_empty());

    let out = env
        .run(
            "fixture-misbehaving",
            "ops.jsonl",
            &[
                "--skip-invalid",
                "skipped.jsonl",
                "--json",
                "--",
                "sh",
                "-c",
                r#"echo x >> "$LEDGER""#,
            ],
        )
        .output()
        .unwrap();
    let s = summary(&out);
    assert_eq!(s["executed"], 4, "{s}");
    assert_eq!(s["skipped"], 2, "{s}");
    assert_eq!(out.status.code(), Some(1), "skipped lines did not complete");
    let skipped: Vec<serde_json::Value> = env
        .lines("skipped.jsonl")
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(skipped.len(), 2, "{skipped:?}");
    assert_eq!(skipped[0]["line"], 3);
    assert!(
        skipped[0]["error"]
            .as_str()
            .unwrap()
            .contains("policy failed")
    );
    assert!(
        skipped[0]["input"]
            .as_str()
            .unwrap()
            .starts_with(r#"{"kind":"trap","tenant":"acme""#),
        "the operation, canonical: {}",
        skipped[0]
    );
    assert_eq!(skipped[1]["line"], 5);
    assert_eq!(skipped[1]["input"], r#"{"kind":"charge""#);
    assert_eq!(env.lines("ledger").len(), 4);

    // The misbehaving policy answers every duplicate unsafely: a re-run
    // counts each as a policy failure, with its key, never as unknown.
    let out = env
        .run(
            "fixture-misbehaving",
            "ops.jsonl",
            &["--skip-invalid", "skipped.jsonl", "--json", "--", "true"],
        )
        .output()
        .unwrap();
    let s = summary(&out);
    assert_eq!(s["policy_failed"], 4, "{s}");
    assert_eq!(s["unknown"], 0, "{s}");
    let stderr = text(&out.stderr);
    assert_eq!(
        stderr.matches("on a duplicate, the policy failed").count(),
        4,
        "{stderr}"
    );
    assert!(stderr.contains("key "), "{stderr}");
    let out = env
        .run(
            "fixture-misbehaving",
            "ops.jsonl",
            &["--skip-invalid", "skipped.jsonl", "--", "true"],
        )
        .output()
        .unwrap();
    assert!(
        text(&out.stdout).contains("policy failed 4"),
        "{}",
        text(&out.stdout)
    );
}

fn overlapping_runs_waiting_for_peers_both_account_for_every_operation(env: Env) {
    const N: usize = 6;
    env.write("ops.jsonl", &charges(N));
    // Run A takes every operation at once and holds them until the gate
    // opens.
    let held = r#"echo "$IDEM_KEY" >> "$LEDGER"; while [ ! -e "$GATE" ]; do sleep 0.05; done; echo charged"#;
    let a = env
        .run(
            "billing-charge",
            "ops.jsonl",
            &["--concurrency", "6", "--json", "--", "sh", "-c", held],
        )
        .spawn()
        .unwrap();
    while env.lines("ledger").len() < N {
        std::thread::yield_now();
    }
    let charge_once = [
        "--json",
        "--",
        "sh",
        "-c",
        r#"echo "$IDEM_KEY" >> "$LEDGER""#,
    ];
    // Without waiting, an overlapping run counts them in progress: exit 1.
    let out = env
        .run("billing-charge", "ops.jsonl", &charge_once)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(summary(&out)["in_progress"], N as u64);
    // Waiting up to a bound that passes while A still holds them: the same.
    let mut bounded = vec!["--wait-for-peers", "300ms"];
    bounded.extend(charge_once);
    let out = env
        .run("billing-charge", "ops.jsonl", &bounded)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(summary(&out)["in_progress"], N as u64);
    assert!(text(&out.stderr).contains("still in progress elsewhere after waiting 300ms"));

    // B waits for as long as A holds them. Once B is seen waiting for every
    // operation (its debug log), the gate opens and A finishes.
    let mut waiting = vec!["--wait-for-peers"];
    waiting.extend(charge_once);
    let mut b = env
        .run("billing-charge", "ops.jsonl", &waiting)
        .env("IDEM_LOG", "idem::job=debug")
        .spawn()
        .unwrap();
    let stderr = BufReader::new(b.stderr.take().unwrap());
    let mut seen = 0;
    let mut lines = stderr.lines();
    while seen < N {
        let line = lines
            .next()
            .expect("B's log ended before it waited")
            .unwrap();
        if line.contains("waiting for the live run holding it") {
            seen += 1;
        }
    }
    std::fs::write(env.path("gate"), "").unwrap();
    let rest: Vec<String> = lines.map(Result::unwrap).collect();
    let b = b.wait_with_output().unwrap();
    let a = a.wait_with_output().unwrap();
    assert_eq!(a.status.code(), Some(0), "{}", text(&a.stderr));
    assert_eq!(b.status.code(), Some(0), "{rest:?}");
    assert_eq!(summary(&a)["executed"], N as u64);
    let sb = summary(&b);
    assert_eq!(sb["replayed"], N as u64, "{sb}");
    assert_eq!(env.lines("ledger").len(), N, "every operation ran once");
}
