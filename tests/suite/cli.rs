//! The `idem` CLI as a user runs it: separate processes, real files.

use std::io::Write;
use std::process::{Command, Output, Stdio};

use idem_tests::{idem_bin, policy_path, postgres_url, workspace_root};

const SEED_OP: &str = r#"{"kind":"charge","tenant":"acme","fields":{"customer":"c1","billing_period":"2026-11","invoice_id":"i1","amount":"100","currency":"EUR"},"run":{"run_id":"nightly-2026-11-30","trigger":"scheduled","attempt":1}}"#;
const SEED_KEY: &str = "7ac249ecd5b53b49b9492abf4c55ce59e61b2dda00009c74f18a652d2270be97";

fn idem(args: &[&str], stdin: &str, cache: &std::path::Path) -> Output {
    let mut child = Command::new(idem_bin())
        .args(args)
        .env("IDEM_CACHE_DIR", cache)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("idem runs");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn key_prints_one_json_object_and_is_stable_across_processes() {
    let cache = tempfile::tempdir().unwrap();
    let policy = policy_path("billing-charge");
    let policy = policy.to_str().unwrap();
    let mut keys = Vec::new();
    for _ in 0..2 {
        let out = idem(&["key", "--policy", policy], SEED_OP, cache.path());
        assert!(out.status.success(), "{}", text(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        for member in [
            "key",
            "fingerprint",
            "partition",
            "policy",
            "retention_s",
            "lease_s",
            "fuel",
        ] {
            assert!(v.get(member).is_some(), "missing {member} in {v}");
        }
        keys.push(v["key"].as_str().unwrap().to_string());
    }
    assert_eq!(keys, [SEED_KEY, SEED_KEY]);
    let out = idem(
        &["key", "--explain", "--policy", policy, "-"],
        SEED_OP,
        cache.path(),
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["explain"]["key_material"][1]["name"], "customer");
    assert_eq!(v["explain"]["operation"]["fields"]["amount"], "100");
}

#[test]
fn key_refusals_and_bad_input_have_their_own_exit_codes() {
    let cache = tempfile::tempdir().unwrap();
    let policy = policy_path("billing-charge");
    let policy = policy.to_str().unwrap();
    let out = idem(
        &["key", "--policy", policy],
        r#"{"kind":"charge","tenant":"acme","fields":{}}"#,
        cache.path(),
    );
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["error"]["code"], "missing-field");
    assert_eq!(v["error"]["status"], 400);

    let out = idem(
        &["key", "--policy", policy],
        r#"{"kind":"charge","tenant":"acme","extra":1}"#,
        cache.path(),
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("unknown field `extra`"),
        "{}",
        text(&out.stderr)
    );

    let out = idem(
        &["key", "--policy", "/nonexistent/p.wasm"],
        SEED_OP,
        cache.path(),
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("/nonexistent/p.wasm"),
        "{}",
        text(&out.stderr)
    );

    let wasi = policy_path("fixture-wasi-import");
    let out = idem(
        &["key", "--policy", wasi.to_str().unwrap()],
        SEED_OP,
        cache.path(),
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("wasi:clocks/wall-clock"),
        "{}",
        text(&out.stderr)
    );

    let bad = policy_path("fixture-misbehaving");
    let out = idem(
        &["key", "--policy", bad.to_str().unwrap()],
        r#"{"kind":"loop","tenant":"t"}"#,
        cache.path(),
    );
    assert_eq!(out.status.code(), Some(4));
    assert!(
        text(&out.stderr).contains("ran out of fuel"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn test_command_reports_cases_and_resources() {
    let cache = tempfile::tempdir().unwrap();
    let cases = workspace_root().join("guest/policies/billing-charge/cases.json");
    let policy = policy_path("billing-charge");
    let out = idem(
        &[
            "test",
            "--policy",
            policy.to_str().unwrap(),
            cases.to_str().unwrap(),
        ],
        "",
        cache.path(),
    );
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert!(
        stdout.contains("fuel") && stdout.contains("memory") && stdout.contains("module"),
        "{stdout}"
    );
    let last = stdout.lines().last().unwrap();
    assert!(last.ends_with("passed, 0 failed"), "{last}");

    // A wrong expectation fails the run with exit 1 and names the case.
    let dir = tempfile::tempdir().unwrap();
    let bad_cases = dir.path().join("cases.json");
    std::fs::write(
        &bad_cases,
        format!(
            r#"{{"cases":[{{"name":"wrong key","op":{SEED_OP},"expect":{{"key":"{}"}}}}]}}"#,
            "0".repeat(64)
        ),
    )
    .unwrap();
    let out = idem(
        &[
            "test",
            "--policy",
            policy.to_str().unwrap(),
            bad_cases.to_str().unwrap(),
        ],
        "",
        cache.path(),
    );
    assert_eq!(out.status.code(), Some(1));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("FAIL wrong key"), "{stdout}");
    assert!(
        stdout.lines().last().unwrap() == "0 passed, 1 failed",
        "{stdout}"
    );
}

#[test]
fn migrate_creates_or_upgrades_a_store_and_says_its_version() {
    let cache = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("idem.db");
    let store = format!("sqlite:{}", file.display());
    // Twice: the second run finds the schema up to date.
    for _ in 0..2 {
        let out = idem(&["migrate", "--store", &store], "", cache.path());
        assert!(out.status.success(), "{}", text(&out.stderr));
        let said = text(&out.stdout);
        assert!(said.starts_with(&store), "{said}");
        let version = idem::store::SCHEMA_VERSION;
        assert!(
            said.contains(&format!("is at schema version {version}")),
            "{said}"
        );
        assert!(file.is_file());
    }
    let out = idem(&["migrate", "--store", "mysql://db/x"], "", cache.path());
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("mysql://db/x"));
}

#[test]
fn migrate_on_postgres_never_prints_the_password() {
    let Some(url) = postgres_url("cli::migrate_on_postgres_never_prints_the_password") else {
        return;
    };
    let cache = tempfile::tempdir().unwrap();
    // The URL's own user and password when it has one; else a made-up
    // password, which a server that trusts the connection never asks for.
    let Some((scheme, rest)) = url.split_once("://") else {
        panic!("IDEM_TEST_POSTGRES_URL is not a URL: {url}");
    };
    let (userinfo, host) = rest.rsplit_once('@').unwrap_or(("postgres", rest));
    let (user, secret) = match userinfo.split_once(':') {
        Some((user, password)) => (user, password.to_string()),
        None => (userinfo, "s3cr3t-Pa55".to_string()),
    };
    let schema = format!("idem_cli_migrate_{}", std::process::id());
    let sep = if host.contains('?') { '&' } else { '?' };
    let store = format!("{scheme}://{user}:{secret}@{host}{sep}idem_schema={schema}");
    let out = idem(&["migrate", "--store", &store], "", cache.path());
    idem_store_conformance::drop_postgres_schema(&store);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let said = text(&out.stdout);
    assert!(said.contains(&format!("{user}:***@")), "{said}");
    let version = idem::store::POSTGRES_SCHEMA_VERSION;
    assert!(
        said.contains(&format!("is at schema version {version}")),
        "{said}"
    );
    for shown in [&said, &text(&out.stderr)] {
        assert!(!shown.contains(&secret), "{shown}");
    }

    // Nor does `--help`, with the URL in the environment.
    let mut help = Command::new(idem_bin());
    let out = help
        .args(["migrate", "--help"])
        .env("IDEM_STORE", &store)
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(text(&out.stdout).contains("IDEM_STORE"));
    assert!(
        !text(&out.stdout).contains(&secret),
        "{}",
        text(&out.stdout)
    );

    // A server that is not there: the error names the URL, masked.
    let store = format!("postgres://{user}:{secret}@127.0.0.1:1/test?connect_timeout=5");
    for command in ["migrate", "inspect", "gc"] {
        let out = idem(&[command, "--store", &store], "", cache.path());
        assert_eq!(
            out.status.code(),
            Some(2),
            "{command}: {}",
            text(&out.stderr)
        );
        let said = text(&out.stderr);
        assert!(
            said.contains(&format!("{user}:***@127.0.0.1:1")),
            "{command}: {said}"
        );
        assert!(!said.contains(&secret), "{command}: {said}");
    }
}
