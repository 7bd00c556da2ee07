//! What an operator runs into with `idem exec`, `idem inspect`, `idem
//! review` and `idem report`: lease bounds, read-only commands that never
//! create a store, a policy failure that leaves no file, run labels, a
//! listing cut at `--limit`, key prefixes, records found by their fields,
//! and what a wrapper reading stdout sees when the outcome is fenced.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use idem_tests::{idem_bin, policy_path, succeed};

mod lookup;

fn op(invoice: &str) -> String {
    format!(
        r#"{{"kind":"charge","tenant":"acme","fields":{{"customer":"c1","billing_period":"2026-11","invoice_id":"{invoice}","amount":"100","currency":"EUR"}}}}"#
    )
}

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
    fn db(&self) -> PathBuf {
        self.path("idem.db")
    }
    fn store(&self) -> String {
        format!("sqlite:{}", self.db().display())
    }
    fn write(&self, name: &str, text: &str) -> PathBuf {
        let p = self.path(name);
        std::fs::write(&p, text).unwrap();
        p
    }
    fn idem(&self, args: &[&str]) -> Command {
        let mut c = Command::new(idem_bin());
        c.args(args)
            .current_dir(self.dir.path())
            .env("IDEM_CACHE_DIR", self.path("cache"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    }
    /// `idem exec` of `op` with `policy` and extra flags, running `sh -c cmd`.
    fn exec(&self, policy: &str, op: &Path, flags: &[&str], cmd: &str) -> Command {
        let policy = policy_path(policy);
        let mut args = vec![
            "exec",
            "--policy",
            policy.to_str().unwrap(),
            "--store",
            &self.store(),
            "--op",
            op.to_str().unwrap(),
        ]
        .into_iter()
        .map(String::from)
        .collect::<Vec<_>>();
        args.extend(flags.iter().map(|f| f.to_string()));
        args.extend(["--", "sh", "-c", cmd].map(String::from));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        self.idem(&args)
    }
    /// `idem run` of charges for invoices i1 to i`n`, each executed.
    fn run_invoices(&self, n: usize) {
        let ops: String = (1..=n).map(|i| op(&format!("i{i}")) + "\n").collect();
        let ops = self.write("ops.jsonl", &ops);
        let policy = policy_path("billing-charge");
        succeed(&mut self.idem(&[
            "run",
            "--policy",
            policy.to_str().unwrap(),
            "--store",
            &self.store(),
            "--ops",
            ops.to_str().unwrap(),
            "--",
            "true",
        ]));
    }
    fn inspect(&self, args: &[&str]) -> Output {
        let store = self.store();
        let mut all = vec!["inspect", "--store", &store];
        all.extend_from_slice(args);
        self.idem(&all).output().unwrap()
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn fails_with(out: &Output, code: i32, needle: &str) {
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "{stderr}");
    assert!(stderr.contains(needle), "expected `{needle}` in: {stderr}");
}

#[test]
fn a_lease_below_a_second_is_refused_before_anything_runs() {
    let env = Env::new();
    let op = env.write("op.json", &op("i1"));
    for lease in ["0s", "999ms", "25h"] {
        let out = env
            .exec("billing-charge", &op, &["--lease", lease], "echo ran > ran")
            .output()
            .unwrap();
        fails_with(&out, 2, "it must be from 1s to 24h");
    }
    assert!(!env.path("ran").exists());
    assert!(!env.db().exists());
    let out = env
        .exec("billing-charge", &op, &["--lease", "1s"], "true")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
}

#[test]
fn inspect_never_creates_a_store() {
    let env = Env::new();
    let typo = env.path("idme.db");
    let out = env
        .idem(&["inspect", "--store", &format!("sqlite:{}", typo.display())])
        .output()
        .unwrap();
    fails_with(
        &out,
        2,
        &format!("no store at {}: no such file", typo.display()),
    );
    assert!(!typo.exists(), "inspect created {}", typo.display());
    let dir = env.dir.path().display().to_string();
    let out = env
        .idem(&["inspect", "--store", &format!("sqlite:{dir}")])
        .output()
        .unwrap();
    fails_with(&out, 2, "it is not a file");
}

#[test]
fn a_policy_refusal_or_failure_leaves_no_store_behind() {
    let env = Env::new();
    let refused = env.write(
        "refused.json",
        r#"{"kind":"charge","tenant":"acme","fields":{"invoice_id":"i1"}}"#,
    );
    let out = env
        .exec("billing-charge", &refused, &[], "echo ran > ran")
        .output()
        .unwrap();
    fails_with(&out, 3, "missing-field");
    let trapping = env.write(
        "trap.json",
        r#"{"kind":"trap","tenant":"acme","fields":{}}"#,
    );
    let out = env
        .exec("fixture-misbehaving", &trapping, &[], "echo ran > ran")
        .output()
        .unwrap();
    fails_with(&out, 4, "the policy failed");
    assert!(!env.path("ran").exists());
    assert!(
        !env.db().exists(),
        "a store was created for an operation the policy could not key"
    );

    // `idem run` too: every line is derived before the store is opened, so
    // a refusal on the last line leaves no store file (and runs nothing).
    let ops = env.write(
        "ops.jsonl",
        &format!(
            "{}\n{}\n",
            op("i1"),
            r#"{"kind":"charge","tenant":"acme","fields":{"invoice_id":"i2"}}"#
        ),
    );
    let policy = policy_path("billing-charge");
    let out = env
        .idem(&[
            "run",
            "--policy",
            policy.to_str().unwrap(),
            "--store",
            &env.store(),
            "--ops",
            ops.to_str().unwrap(),
            "--",
            "sh",
            "-c",
            "echo ran >> ran",
        ])
        .output()
        .unwrap();
    fails_with(&out, 3, "line 2");
    assert!(!env.path("ran").exists());
    assert!(
        !env.db().exists(),
        "idem run created a store before finding a line it could not key"
    );
    // And a store that cannot be opened is named, after the lines were
    // read, with nothing run.
    let out = env
        .idem(&[
            "run",
            "--policy",
            policy.to_str().unwrap(),
            "--store",
            &format!("sqlite:{}/no/such/dir/idem.db", env.dir.path().display()),
            "--ops",
            env.write("one.jsonl", &format!("{}\n", op("i1")))
                .to_str()
                .unwrap(),
            "--",
            "sh",
            "-c",
            "echo ran >> ran",
        ])
        .output()
        .unwrap();
    fails_with(&out, 2, "does not exist");
    assert!(!env.path("ran").exists());
}

#[test]
fn a_run_id_alone_is_recorded_as_scheduled_and_a_printed_key_prefix_finds_it() {
    let env = Env::new();
    let op = env.write("op.json", &op("i1"));
    succeed(&mut env.exec("billing-charge", &op, &["--run-id", "nightly-9"], "true"));
    let table = text(&succeed(&mut env.idem(&["inspect", "--store", &env.store()])).stdout);
    let row = table.lines().nth(1).expect("one record");
    let prefix = row.split_whitespace().next().unwrap();
    assert_eq!(prefix.len(), 16, "{table}");
    assert!(row.contains("nightly-9/scheduled"), "{table}");

    let out = env.inspect(&[prefix]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let record: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(record["key"].as_str().unwrap().starts_with(prefix));
    assert_eq!(record["holder"]["run_id"], "nightly-9");
    assert_eq!(record["holder"]["trigger"], "scheduled");
    // Upper case is the same key; a prefix of nothing is no key.
    assert!(env.inspect(&[&prefix.to_uppercase()]).status.success());
    fails_with(&env.inspect(&["xyz"]), 2, "`xyz` is not a key");
    let other = if prefix.starts_with('0') { "1" } else { "0" };
    fails_with(&env.inspect(&[other]), 1, "no record with key");
}

#[test]
fn inspect_says_when_the_listing_is_cut_and_refuses_an_ambiguous_prefix() {
    let env = Env::new();
    // Seventeen keys: two of them share their first hex digit.
    env.run_invoices(17);
    let cut = env.inspect(&["--limit", "5"]);
    let table = text(&cut.stdout);
    assert_eq!(table.lines().count(), 1 + 5 + 1, "{table}");
    assert!(
        table.contains("5 records shown; the listing stops at --limit 5: more records match"),
        "{table}"
    );
    let whole = text(&env.inspect(&["--limit", "17"]).stdout);
    assert!(whole.ends_with("17 records\n"), "{whole}");

    let json = env.inspect(&["--limit", "5", "--json"]);
    let listed: Vec<serde_json::Value> = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(listed.len(), 5);
    assert!(text(&json.stderr).contains("the listing stops at --limit 5"));

    let all: Vec<serde_json::Value> =
        serde_json::from_slice(&env.inspect(&["--json"]).stdout).unwrap();
    let firsts: Vec<char> = all
        .iter()
        .map(|r| r["key"].as_str().unwrap().chars().next().unwrap())
        .collect();
    let shared = firsts
        .iter()
        .find(|c| firsts.iter().filter(|d| d == c).count() > 1)
        .expect("17 keys, 16 first digits");
    fails_with(
        &env.inspect(&[&shared.to_string()]),
        2,
        &format!("records have keys starting with {shared}; give more of the key"),
    );
}

/// A command prints, then its `idem exec` is paused past the lease while a
/// second exec takes the claim over (provider-charge re-executes an
/// expired claim); when it resumes, its completion is fenced (exit 76).
/// Without `--buffer-stdout` the wrapper has already seen the output (only
/// the exit status says it was not recorded); with it, it sees nothing.
#[cfg(unix)]
#[test]
fn a_fenced_completion_and_what_a_stdout_reader_sees() {
    for buffer in [false, true] {
        let env = Env::new();
        let op = env.write("op.json", &op("i1"));
        let mut flags = vec!["--lease", "1s"];
        if buffer {
            flags.push("--buffer-stdout");
        }
        let first = env
            .exec(
                "provider-charge",
                &op,
                &flags,
                "echo charged; touch printed; while [ ! -e go ]; do sleep 0.05; done",
            )
            .spawn()
            .unwrap();
        while !env.path("printed").exists() {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let signal = |sig: &str| {
            succeed(Command::new("kill").args([sig, &first.id().to_string()]));
        };
        signal("-STOP");
        // Until the paused holder's lease lapses the second exec is told
        // "in progress" (75); then it takes over and runs.
        loop {
            let second = env
                .exec("provider-charge", &op, &[], "echo second")
                .output()
                .unwrap();
            match second.status.code() {
                Some(75) => std::thread::sleep(std::time::Duration::from_millis(200)),
                Some(0) => {
                    assert_eq!(text(&second.stdout), "second\n");
                    break;
                }
                other => panic!("second exec: {other:?} {}", text(&second.stderr)),
            }
        }
        std::fs::write(env.path("go"), "").unwrap();
        signal("-CONT");
        let out = first.wait_with_output().unwrap();
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(76), "{stderr}");
        assert!(stderr.contains("deposed"), "{stderr}");
        if buffer {
            assert_eq!(text(&out.stdout), "", "held output must not leak");
            assert!(stderr.contains("stdout (8 bytes) is withheld"), "{stderr}");
        } else {
            assert_eq!(text(&out.stdout), "charged\n");
        }
    }
}

#[test]
fn buffered_stdout_is_released_once_the_outcome_is_recorded() {
    let env = Env::new();
    let op = env.write("op.json", &op("i1"));
    let first = succeed(&mut env.exec("billing-charge", &op, &["--buffer-stdout"], "echo charged"));
    assert_eq!(text(&first.stdout), "charged\n");
    let failed = env
        .exec(
            "billing-charge",
            &env.write("op2.json", &op_two()),
            &["--buffer-stdout"],
            "echo tried; exit 3",
        )
        .output()
        .unwrap();
    assert_eq!(failed.status.code(), Some(3));
    assert_eq!(
        text(&failed.stdout),
        "tried\n",
        "a recorded failure releases its output too"
    );
    let replay = succeed(&mut env.exec("billing-charge", &op, &["--buffer-stdout"], "echo again"));
    assert_eq!(text(&replay.stdout), "charged\n");
}

fn op_two() -> String {
    op("i2")
}

/// On PostgreSQL too, the commands that only read never create anything:
/// a mistyped `?idem_schema=` is an error naming the store, and the schema
/// is not created (`idem migrate` would).
#[test]
fn read_only_commands_never_create_a_postgres_schema() {
    let Some(url) = idem_tests::postgres_url("read_only_commands_never_create_a_postgres_schema")
    else {
        return;
    };
    let env = Env::new();
    let schema = idem_store_conformance::fresh_schema();
    let store = format!("{url}?idem_schema={schema}&sslmode=disable");
    for command in [
        vec!["inspect"],
        vec!["report"],
        vec!["review"],
        vec![
            "resolve",
            &"ab".repeat(32),
            "--release",
            "--reason",
            "x",
            "--by",
            "ops",
        ],
    ] {
        let mut args = command.clone();
        args.extend(["--store", &store]);
        let out = env.idem(&args).output().unwrap();
        fails_with(
            &out,
            2,
            "does not exist: this command only reads, and neither creates nor upgrades a store",
        );
    }
    let exists = tokio::runtime::Runtime::new().unwrap().block_on(async {
        let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(conn);
        client
            .query_one(
                "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)",
                &[&schema],
            )
            .await
            .unwrap()
            .get::<_, bool>(0)
    });
    assert!(!exists, "a read-only command created schema {schema}");
    // `idem migrate` creates it; then the same commands read it.
    let out = env.idem(&["migrate", "--store", &store]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = env.idem(&["inspect", "--store", &store]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    idem_store_conformance::drop_postgres_schema(&store);
}
