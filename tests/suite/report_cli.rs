//! Why did it run twice, with real processes: each cause produced on
//! purpose with `idem exec` and `idem run` (two runs at once, a policy
//! change that moves every key; a stopped holder's scheduler retry and a
//! killed run re-run by hand are in [`crate::review_cli`], which settles
//! what they leave), classified by `idem report` on SQLite and
//! PostgreSQL; the commands and helpers every forensics test here runs.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use idem_tests::{TestStore, idem_bin, policy_path, postgres_url};
use serde_json::Value;

pub(crate) fn op(invoice: u32) -> String {
    // The invoice in the tenant too: `fixture-misbehaving` keys on kind and
    // tenant alone.
    format!(
        r#"{{"kind":"charge","tenant":"acme-i{invoice}","fields":{{"customer":"c{invoice}","billing_period":"2026-11","invoice_id":"i{invoice}","amount":"100","currency":"EUR"}}}}"#
    )
}

/// The test's directory and store (`idem_tests::TestStore`), with the
/// commands this file runs against them.
pub(crate) struct Env(TestStore);

impl std::ops::Deref for Env {
    type Target = TestStore;
    fn deref(&self) -> &TestStore {
        &self.0
    }
}

impl Env {
    pub(crate) fn sqlite() -> Env {
        Env(TestStore::sqlite())
    }

    pub(crate) fn postgres(url: &str) -> Env {
        Env(TestStore::postgres(url))
    }

    pub(crate) fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub(crate) fn write(&self, name: &str, text: &str) -> PathBuf {
        let p = self.path(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    pub(crate) fn idem(&self, args: &[&str]) -> Command {
        let mut c = Command::new(idem_bin());
        c.args(args)
            .env("IDEM_CACHE_DIR", self.path("cache"))
            .env("DIR", self.dir.path())
            .env("USER", "alice")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    }

    pub(crate) fn exec(&self, op: &Path, flags: &[&str], cmd: &str) -> Command {
        let policy = policy_path("billing-charge");
        let mut args = vec![
            "exec",
            "--policy",
            policy.to_str().unwrap(),
            "--store",
            &self.store,
            "--op",
            op.to_str().unwrap(),
        ];
        args.extend_from_slice(flags);
        args.extend_from_slice(&["--", "sh", "-c", cmd]);
        self.idem(&args)
    }

    pub(crate) fn run(&self, policy: &str, ops: &Path, flags: &[&str], cmd: &str) -> Command {
        let policy = policy_path(policy);
        let mut args = vec![
            "run",
            "--policy",
            policy.to_str().unwrap(),
            "--store",
            &self.store,
            "--ops",
            ops.to_str().unwrap(),
        ];
        args.extend_from_slice(flags);
        args.extend_from_slice(&["--", "sh", "-c", cmd]);
        self.idem(&args)
    }

    pub(crate) fn report(&self, extra: &[&str]) -> Value {
        let mut args = vec!["report", "--store", &self.store, "--json"];
        args.extend_from_slice(extra);
        let out = output(self.idem(&args));
        assert!(out.status.success(), "report: {}", text(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    }

    /// The one record's JSON (`idem inspect`).
    pub(crate) fn records(&self) -> Vec<Value> {
        let out = output(self.idem(&["inspect", "--store", &self.store, "--json"]));
        assert!(out.status.success(), "inspect: {}", text(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    }

    /// Waits (polling the store, no timing assumed) until no record's lease
    /// is live.
    pub(crate) fn until_every_lease_expired(&self) {
        while self
            .records()
            .iter()
            .any(|r| r["state"] == "in-progress" && r["lease_remaining_ms"].as_u64() != Some(0))
        {
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }
}

pub(crate) fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

pub(crate) fn output(mut c: Command) -> Output {
    c.output().unwrap()
}

pub(crate) fn signal(child: &Child, sig: &str) {
    let status = Command::new("kill")
        .args([sig, &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

/// The causes a report names, with their counts.
pub(crate) fn causes(report: &Value) -> Vec<(String, usize)> {
    let mut counts: Vec<(String, usize)> = Vec::new();
    for d in report["duplicates"].as_array().unwrap() {
        let cause = d["cause"].as_str().unwrap().to_string();
        match counts.iter_mut().find(|(c, _)| *c == cause) {
            Some((_, n)) => *n += 1,
            None => counts.push((cause, 1)),
        }
    }
    counts
}

/// On SQLite, and on PostgreSQL when the test database is configured
/// (SKIPPED without it; a failure under `CI=true`).
pub(crate) fn on_every_store(test: &str, check: impl Fn(&Env)) {
    check(&Env::sqlite());
    if let Some(url) = postgres_url(&format!("report_cli::{test}")) {
        check(&Env::postgres(&url));
    }
}

// Two runs of the nightly job at once: run a holds c1 until run b has
// started (b is told c1 is in progress and charges c2). Every key both
// asked for: two instances overlapped.
#[test]
fn two_runs_at_once_are_named_an_overlap() {
    on_every_store("overlap", |env| {
        let ops = env.write("ops.jsonl", &format!("{}\n{}\n", op(1), op(2)));
        let cmd = r#"if [ "$WHO" = a ]; then touch "$DIR/a"; while [ ! -f "$DIR/b" ]; do sleep 0.05; done; else touch "$DIR/b"; sleep 0.5; fi; echo ok"#;
        // Run a reaches c2 as soon as b has started it, maybe before b has
        // recorded its end: it waits for that (a peer's claim), then replays.
        let mut a = env.run(
            "billing-charge",
            &ops,
            &["--run-id", "run-a", "--wait-for-peers", "60s"],
            cmd,
        );
        a.env("WHO", "a");
        let a = a.spawn().unwrap();
        while !env.path("a").exists() {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let mut b = env.run("billing-charge", &ops, &["--run-id", "run-b"], cmd);
        b.env("WHO", "b");
        let b = output(b);
        let a = a.wait_with_output().unwrap();
        assert!(
            a.status.success(),
            "{:?} {} {}",
            a.status,
            text(&a.stdout),
            text(&a.stderr)
        );
        let _ = b;
        let report = env.report(&[]);
        let found = causes(&report);
        assert_eq!(found.len(), 1, "{report:#}");
        assert_eq!(found[0].0, "overlap", "{report:#}");
        // The text form says it too.
        let out = output(env.idem(&["report", "--store", &env.store]));
        assert!(
            text(&out.stdout).contains("two instances of the job overlapped"),
            "{}",
            text(&out.stdout)
        );
    });
}

// A policy change between two runs moves every key: the second run
// charges again, and the report says so first, as not prevented.
#[test]
fn a_policy_change_that_moves_keys_is_named_key_drift() {
    on_every_store("drift", |env| {
        let ops = env.write("ops.jsonl", &format!("{}\n{}\n", op(1), op(2)));
        let first = output(env.run("billing-charge", &ops, &["--run-id", "v1"], "echo ok"));
        assert!(first.status.success(), "{}", text(&first.stderr));
        let second = output(env.run(
            "fixture-misbehaving",
            &ops,
            &["--run-id", "v2", "--trigger", "manual"],
            "echo ok",
        ));
        assert!(second.status.success(), "{}", text(&second.stderr));
        let report = env.report(&[]);
        assert_eq!(
            causes(&report),
            vec![("key-drift".to_string(), 2)],
            "{report:#}"
        );
        let out = output(env.idem(&["report", "--store", &env.store]));
        let shown = text(&out.stdout);
        assert!(shown.contains("NOT prevented"), "{shown}");
    });
}
