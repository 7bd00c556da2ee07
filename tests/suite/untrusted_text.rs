//! What an untrusted upstream writes, through the CLI on both stores: a NUL
//! (which no store keeps) is refused naming where it was, before anything
//! is claimed, and never passes for a store outage; control and
//! bidirectional characters are shown escaped on the operator's terminal.

use std::process::{Command, Output, Stdio};

use idem_tests::{TestStore, idem_bin, policy_path, postgres_url};

/// A billing operation with `invoice` as its invoice id and `customer` as
/// its customer, in JSON (so `\u0000` spells a NUL).
fn charge(customer: &str, invoice: &str) -> String {
    format!(
        r#"{{"kind":"charge","tenant":"acme","fields":{{"customer":"{customer}","billing_period":"2026-11","invoice_id":"{invoice}","amount":"100","currency":"EUR"}}}}"#
    )
}

fn idem(at: &TestStore, args: &[&str]) -> Command {
    let mut c = Command::new(idem_bin());
    c.args(args)
        .current_dir(at.dir.path())
        .env("IDEM_CACHE_DIR", at.dir.path().join("cache"))
        .env("LEDGER", at.dir.path().join("ledger"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `idem exec` of the operation in file `name`, appending to the ledger.
fn exec(at: &TestStore, name: &str, op: &str) -> Output {
    let path = at.dir.path().join(name);
    std::fs::write(&path, op).unwrap();
    let policy = policy_path("billing-charge");
    idem(
        at,
        &[
            "exec",
            "--policy",
            policy.to_str().unwrap(),
            "--store",
            &at.store,
            "--store-outage",
            "10m",
            "--op",
            path.to_str().unwrap(),
            "--",
            "sh",
            "-c",
            r#"echo charged >> "$LEDGER""#,
        ],
    )
    .output()
    .unwrap()
}

fn ledger(at: &TestStore) -> usize {
    std::fs::read_to_string(at.dir.path().join("ledger"))
        .unwrap_or_default()
        .lines()
        .count()
}

fn records(at: &TestStore) -> Vec<serde_json::Value> {
    let out = idem(at, &["inspect", "--store", &at.store, "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Each scenario runs on SQLite and on PostgreSQL.
macro_rules! on_every_store {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(#[test]
            fn $name() {
                super::$name(idem_tests::TestStore::sqlite());
            })*
        }
        mod postgres {
            $(#[test]
            fn $name() {
                if let Some(url) = super::postgres_url(concat!("untrusted_text::", stringify!($name))) {
                    super::$name(idem_tests::TestStore::postgres(&url));
                }
            })*
        }
    };
}

on_every_store!(
    a_nul_is_refused_naming_the_field_and_nothing_is_claimed,
    what_came_from_an_operation_is_shown_escaped,
);

fn a_nul_is_refused_naming_the_field_and_nothing_is_claimed(at: TestStore) {
    // A good operation first: the store exists and holds one record.
    let out = exec(&at, "good.json", &charge("c1", "i1"));
    assert!(out.status.success(), "{}", text(&out.stderr));

    // `idem exec`: refused at once (exit 2), the field named; with an
    // outage budget of ten minutes, a NUL taken for an outage would hang.
    let out = exec(&at, "nul.json", &charge("nul-exec", r"i\u00002"));
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("field `invoice_id`") && stderr.contains("NUL"),
        "{stderr}"
    );
    assert!(!stderr.contains("unavailable"), "{stderr}");
    assert!(!stderr.contains('\0'), "the NUL itself printed: {stderr:?}");

    // `idem run`: the line is named and refused; with --skip-invalid the
    // others run and it is counted skipped.
    let ops = [
        charge("c3", "i3"),
        charge("nul-run", r"i\u00004"),
        charge("c5", "i5"),
    ]
    .join("\n");
    std::fs::write(at.dir.path().join("ops.jsonl"), ops + "\n").unwrap();
    let policy = policy_path("billing-charge");
    let run = |extra: &[&str]| {
        let mut args = vec![
            "run",
            "--policy",
            policy.to_str().unwrap(),
            "--store",
            &at.store,
            "--store-outage",
            "10m",
            "--ops",
            "ops.jsonl",
            "--json",
        ];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--", "sh", "-c", r#"echo charged >> "$LEDGER""#]);
        idem(&at, &args).output().unwrap()
    };
    let out = run(&[]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("line 2") && stderr.contains("field `invoice_id`"),
        "{stderr}"
    );
    assert!(!stderr.contains("unavailable"), "{stderr}");
    assert_eq!(ledger(&at), 1, "a run with a refused line ran something");

    let out = run(&["--skip-invalid", "skipped.jsonl"]);
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", text(&out.stderr)));
    assert_eq!(
        (
            &summary["executed"],
            &summary["skipped"],
            &summary["unknown"]
        ),
        (
            &serde_json::json!(2),
            &serde_json::json!(1),
            &serde_json::json!(0)
        ),
        "{summary}"
    );
    assert!(summary.get("outage").is_none(), "{summary}");
    assert_eq!(ledger(&at), 3);

    // Nothing was claimed for either refused operation.
    let kept: Vec<String> = records(&at)
        .iter()
        .map(|r| r["operation"].to_string())
        .collect();
    assert_eq!(kept.len(), 3, "{kept:?}");
    assert!(kept.iter().all(|k| !k.contains("nul-")), "{kept:?}");
    assert!(kept.iter().any(|k| k.contains("c5")), "{kept:?}");
}

fn what_came_from_an_operation_is_shown_escaped(at: TestStore) {
    // An ESC sequence that would clear the screen, a newline forging an
    // `idem:` line, and a right-to-left override that reads "1000 EUR".
    let op = charge(r"c1\u001b[2J\nidem: all good", r"\u202eRUE 0001");
    let out = exec(&at, "op.json", &op);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let key = records(&at)[0]["key"].as_str().unwrap().to_string();
    // The table may cut the operation short; the report shows it whole.
    for (args, whole) in [
        (vec!["inspect", "--store", &at.store], false),
        (vec!["report", "--store", &at.store, "--key", &key], true),
    ] {
        let out = idem(&at, &args).output().unwrap();
        let stdout = text(&out.stdout);
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
        assert!(
            !stdout.contains(['\u{1b}', '\u{202e}']) && !stdout.contains("\nidem: all good"),
            "{args:?} printed raw control characters: {stdout:?}"
        );
        if whole {
            assert!(
                stdout.contains(r"\u{202e}RUE 0001")
                    && stdout.contains(r"c1\u{1b}[2J\u{a}idem: all good"),
                "{args:?} shows the values escaped: {stdout}"
            );
        }
    }
}
