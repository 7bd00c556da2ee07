//! `idem exec` and `idem run` as separate processes on a real SQLite file:
//! racing processes, a holder killed after its effect, a run killed midway,
//! bad input.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use idem_tests::{idem_bin, policy_path};

const OP: &str = r#"{"kind":"charge","tenant":"acme","fields":{"customer":"c1","billing_period":"2026-11","invoice_id":"i1","amount":"100","currency":"EUR"}}"#;

struct Env {
    dir: tempfile::TempDir,
}

impl Env {
    fn new() -> Self {
        Env {
            dir: tempfile::tempdir().unwrap(),
        }
    }
    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
    fn store(&self) -> String {
        format!("sqlite:{}", self.path("idem.db").display())
    }
    fn write(&self, name: &str, text: &str) -> PathBuf {
        let p = self.path(name);
        std::fs::write(&p, text).unwrap();
        p
    }
    fn ledger_lines(&self) -> Vec<String> {
        std::fs::read_to_string(self.path("ledger"))
            .unwrap_or_default()
            .lines()
            .map(String::from)
            .collect()
    }
    fn idem(&self, args: &[&str]) -> Command {
        let mut c = Command::new(idem_bin());
        c.args(args)
            .env("IDEM_CACHE_DIR", self.path("cache"))
            .env("LEDGER", self.path("ledger"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    }
    fn exec(&self, op: &Path, store: &str, cmd: &str) -> Command {
        let policy = policy_path("billing-charge");
        self.idem(&[
            "exec",
            "--policy",
            policy.to_str().unwrap(),
            "--store",
            store,
            "--op",
            op.to_str().unwrap(),
            "--",
            "sh",
            "-c",
            cmd,
        ])
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn run(mut c: Command) -> Output {
    c.output().unwrap()
}

#[test]
fn racing_processes_run_the_command_exactly_once() {
    let env = Env::new();
    let op = env.write("op.json", OP);
    // Create the store first, so the racers contend on claims, not on
    // creating the file.
    assert!(
        run(env.idem(&["gc", "--store", &env.store()]))
            .status
            .success()
    );
    let children: Vec<Child> = (0..8)
        .map(|_| {
            // The sleep widens the race window; nothing is timed.
            env.exec(
                &op,
                &env.store(),
                r#"echo "$IDEM_KEY $IDEM_FENCE" >> "$LEDGER"; sleep 0.2; echo charged"#,
            )
            .spawn()
            .unwrap()
        })
        .collect();
    let mut codes = Vec::new();
    for child in children {
        let out = child.wait_with_output().unwrap();
        codes.push(out.status.code());
        let code = out.status.code();
        assert!(
            code == Some(0) || code == Some(75),
            "{code:?}: {}",
            text(&out.stderr)
        );
        if code == Some(0) {
            assert_eq!(
                text(&out.stdout),
                "charged\n",
                "executed or replayed: the same stdout"
            );
        }
    }
    assert_eq!(
        env.ledger_lines().len(),
        1,
        "the effect ran once: {:?} (exit codes {codes:?})",
        env.ledger_lines()
    );
    // Afterwards every duplicate replays.
    let out = run(env.exec(&op, &env.store(), r#"echo again >> "$LEDGER""#));
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(text(&out.stdout), "charged\n");
    assert_eq!(env.ledger_lines().len(), 1);
}

#[test]
fn a_holder_killed_after_its_effect_is_never_re_executed_blindly() {
    let env = Env::new();
    let op = env.write("op.json", OP);
    // The command charges, then its idem process is killed before it can
    // record completion.
    let out = run(env.exec(
        &op,
        &env.store(),
        r#"echo "$IDEM_KEY" >> "$LEDGER"; kill -9 $PPID; sleep 1"#,
    ));
    assert_eq!(out.status.code(), None, "idem itself was killed");
    assert_eq!(env.ledger_lines().len(), 1);
    let key = env.ledger_lines()[0].clone();
    // The database reopens consistent, and holds the claim.
    let out = run(env.idem(&["inspect", "--store", &env.store(), &key]));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let record: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(record["state"], "in-progress");
    assert!(record["holder"]["pid"].as_u64().is_some());
    // A re-run does not charge again: the claim is in progress until its
    // lease expires, and then the policy sends it to review.
    let out = run(env.exec(&op, &env.store(), r#"echo "$IDEM_KEY" >> "$LEDGER""#));
    assert_eq!(out.status.code(), Some(75), "{}", text(&out.stderr));
    assert_eq!(env.ledger_lines().len(), 1);
}

#[test]
fn a_run_killed_midway_loses_nothing_and_a_re_run_finishes_the_rest() {
    let env = Env::new();
    let ops: String = (0..300)
        .map(|i| {
            format!(
                r#"{{"kind":"charge","tenant":"acme","fields":{{"customer":"c{i}","billing_period":"2026-11","invoice_id":"i{i}","amount":"{i}","currency":"EUR"}}}}"#
            ) + "\n"
        })
        .collect();
    let ops = env.write("ops.jsonl", &ops);
    let policy = policy_path("billing-charge");
    let run_args = |run_id: &'static str| {
        vec![
            "run".to_string(),
            "--policy".into(),
            policy.to_str().unwrap().into(),
            "--store".into(),
            env.store(),
            "--ops".into(),
            ops.to_str().unwrap().into(),
            "--concurrency".into(),
            "4".into(),
            "--run-id".into(),
            run_id.into(),
            "--".into(),
            "sh".into(),
            "-c".into(),
            r#"echo "$IDEM_KEY" >> "$LEDGER""#.into(),
        ]
    };
    let args = run_args("nightly");
    let mut cmd = env.idem(&args.iter().map(String::as_str).collect::<Vec<_>>());
    // Its own process group, so the crash takes its commands down with it,
    // as a machine crash would.
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    let mut child = cmd.spawn().unwrap();
    // Crash it once some effects have happened (a condition, not a timer).
    while env.ledger_lines().len() < 40 {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("the run ended before it could be killed: {status}");
        }
        std::thread::yield_now();
    }
    let group = format!("-{}", child.id());
    assert!(
        Command::new("kill")
            .args(["-KILL", "--", &group])
            .status()
            .unwrap()
            .success()
    );
    child.wait().unwrap();

    // Every effect has a record: completed, or still claimed (killed between
    // effect and completion). Nothing is charged twice.
    let records = inspect_all(&env);
    let charged_before = env.ledger_lines();
    assert_unique(&charged_before);
    for key in &charged_before {
        let r = records
            .iter()
            .find(|r| r["key"] == key.as_str())
            .unwrap_or_else(|| panic!("effect {key} has no record"));
        assert!(
            r["state"] == "completed" || r["state"] == "in-progress",
            "{r}"
        );
    }

    // A manual re-run executes only what had not happened; what was cut off
    // mid-flight stays claimed (in progress), never charged twice.
    let args = run_args("manual-rerun");
    let out = run(env.idem(&args.iter().map(String::as_str).collect::<Vec<_>>()));
    let summary = text(&out.stdout);
    let ledger = env.ledger_lines();
    assert_unique(&ledger);
    let records = inspect_all(&env);
    assert_eq!(
        records.len(),
        300,
        "every operation has a record: {summary}"
    );
    let in_progress: Vec<_> = records
        .iter()
        .filter(|r| r["state"] == "in-progress")
        .collect();
    assert!(
        summary.contains(&format!("in progress {}", in_progress.len())),
        "{summary}"
    );
    for r in &records {
        let charged = ledger.iter().any(|k| r["key"] == k.as_str());
        if r["state"] == "completed" {
            assert!(charged, "completed but never charged: {r}");
        } else {
            assert_eq!(r["state"], "in-progress", "{r}");
        }
    }
    assert_eq!(
        ledger.len()
            + in_progress
                .iter()
                .filter(|r| !ledger.iter().any(|k| r["key"] == k.as_str()))
                .count(),
        300
    );
}

fn inspect_all(env: &Env) -> Vec<serde_json::Value> {
    let out = run(env.idem(&[
        "inspect",
        "--json",
        "--limit",
        "1000",
        "--store",
        &env.store(),
    ]));
    assert!(out.status.success(), "{}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn assert_unique(ledger: &[String]) {
    let unique: std::collections::HashSet<&String> = ledger.iter().collect();
    assert_eq!(unique.len(), ledger.len(), "a key was charged twice");
}

#[test]
fn bad_input_is_refused_and_nothing_is_written() {
    let env = Env::new();
    let good = env.write("op.json", OP);
    let cases: Vec<(PathBuf, String, &str)> = vec![
        (
            env.write("bad.json", "{\"kind\":\"charge\""),
            env.store(),
            "EOF",
        ),
        (
            env.write(
                "unknown.json",
                r#"{"kind":"charge","tenant":"a","colour":"red"}"#,
            ),
            env.store(),
            "unknown field `colour`",
        ),
        (
            env.write(
                "big.json",
                &format!(r#"{{"kind":"charge","tenant":"{}"}}"#, "a".repeat(70_000)),
            ),
            env.store(),
            "the limit is 65536 bytes",
        ),
        (
            good.clone(),
            "redis://127.0.0.1/".into(),
            "redis://127.0.0.1/",
        ),
        (
            good.clone(),
            format!("sqlite:{}", env.dir.path().display()),
            "directory",
        ),
    ];
    for (op, store, needle) in cases {
        let out = run(env.exec(&op, &store, r#"echo ran >> "$LEDGER""#));
        assert_eq!(
            out.status.code(),
            Some(2),
            "{needle}: {}",
            text(&out.stderr)
        );
        assert!(
            text(&out.stderr).contains(needle),
            "{needle}: {}",
            text(&out.stderr)
        );
    }
    assert!(env.ledger_lines().is_empty());
    assert!(
        !env.path("idem.db").exists(),
        "no store was created for bad input"
    );

    // A file that is not a store is left exactly as it was.
    let not_a_db = env.write("notes.txt", "my notes, not a database\n");
    let out = run(env.exec(&good, &format!("sqlite:{}", not_a_db.display()), "true"));
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("not a SQLite database"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(&not_a_db).unwrap(),
        "my notes, not a database\n"
    );
    assert!(env.ledger_lines().is_empty());
}

/// What failed, kept: a failing command's stderr still reaches ours, and
/// its last line is the detail of the failure in the attempt log, shown by
/// `idem report` (escaped: it is the command's own text).
#[test]
fn a_failing_commands_last_words_are_kept_in_the_attempt_log() {
    let env = Env::new();
    let op = env.write("op.json", OP);
    let out = run(env.exec(
        &op,
        &env.store(),
        "echo \"$IDEM_KEY\" > \"$LEDGER\"; echo 'calling the provider' >&2; \
         printf 'card declined: \\033[31minsufficient funds\\n' >&2; exit 3",
    ));
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains("calling the provider") && stderr.contains("card declined"),
        "passed through: {stderr}"
    );
    let key = env.ledger_lines().pop().expect("the command wrote its key");
    let store = env.store();
    let report = run(env.idem(&["report", "--store", &store, "--key", &key, "--json"]));
    let shown = text(&report.stdout);
    assert!(report.status.success(), "{}", text(&report.stderr));
    let json: serde_json::Value = serde_json::from_str(&shown).unwrap();
    let details: Vec<String> = json["timeline"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e["detail"].as_str().map(str::to_string))
        .collect();
    assert!(
        details
            .iter()
            .any(|d| d
                == "command exited with status 3: card declined: \u{1b}[31minsufficient funds"),
        "the failure's last line, kept as the command said it: {details:?}\n{shown}"
    );
    let text_report = run(env.idem(&["report", "--store", &store, "--key", &key]));
    let shown = text(&text_report.stdout);
    assert!(
        shown.contains("card declined") && !shown.contains('\u{1b}'),
        "shown, escaped: {shown}"
    );
}
