//! The client packages of `idem serve` against a real server: the Python
//! package (`clients/python`, its pytest suite, in a virtual environment with
//! a pinned pytest and psycopg) and the TypeScript one (`clients/typescript`, `npm ci`
//! then `npm test`: the generated schema checked against the OpenAPI
//! document, the build, `node --test`). Each runs on a fresh SQLite store,
//! with a token and a short lease (the heartbeat tests outlive it); then
//! the store is read to check that the race the tests ran charged once, and
//! that no claim lapsed. The example of each client's page of the book runs
//! as written, twice: the second run charges nothing.
//!
//! The client tests run with `CI=true`, so that a test they would skip
//! (no server, no token) fails here instead. Each client's PostgreSQL
//! helper (the completion inside the caller's own transaction) is tested
//! after, against a server on a PostgreSQL store (`postgres.rs`).

mod postgres;

use std::path::PathBuf;
use std::process::Command;

use idem_store::{AttemptFilter, ListFilter, RecordState};
use idem_tests::{passes, tool_available, workspace_root};
use serde_json::json;

use crate::serve::{Server, TestStore};

/// The pytest release the Python client's tests run with.
const PYTEST: &str = "pytest==9.2.0";
/// The psycopg release `idem_client.postgres` is tested with
/// (`postgres.rs`), with libpq in its wheel.
const PSYCOPG: &str = "psycopg[binary]==3.3.9";
/// The token the server is started with.
const TOKEN: &str = "clients-t0ken";
/// The prefix of every invoice id the clients' tests make
/// (`IDEM_TEST_RUN`), to find their records afterwards.
const RUN: &str = "suite";
/// A lease the heartbeat tests can outlive in a few seconds.
const LEASE: &str = "3s";

/// A server for one client's tests: its own store, a token, a short lease.
fn start() -> (TestStore, Server) {
    start_on(TestStore::sqlite())
}

/// [`start`] on `store`.
fn start_on(store: TestStore) -> (TestStore, Server) {
    let server = Server::start(
        &store.url,
        &["--lease", LEASE],
        &[("IDEM_SERVE_TOKEN", TOKEN)],
    );
    (store, server)
}

/// Points `command` at `server`, as the clients' tests read it.
fn against<'c>(command: &'c mut Command, server: &Server) -> &'c mut Command {
    command
        .env("IDEM_SERVE_URL", format!("http://{}", server.addr))
        .env("IDEM_SERVE_TOKEN", TOKEN)
        .env("IDEM_TEST_RUN", RUN)
        .env("CI", "true")
}

/// A python3 with the pinned pytest and psycopg, installed on first use
/// into a virtual environment kept in the target directory; `None` (a
/// skip, said so) without python3. The client itself comes from the work
/// tree by `PYTHONPATH`, never installed: the target directory may be
/// shared by several work trees.
fn python_with_pytest(test: &str) -> Option<PathBuf> {
    /// Two tests of this binary may want the environment at once.
    static MADE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    if !tool_available(test, "python3") {
        return None;
    }
    let venv = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(
        format!("{PYTEST}-{PSYCOPG}")
            .replace("==", "-")
            .replace(['[', ']'], ""),
    );
    let python = venv.join("bin").join("python");
    // Written once everything is installed: without it, the venv is half made.
    let made = venv.join("idem-installed");
    let _one = MADE.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if !made.is_file() {
        passes(
            "python3 -m venv",
            Command::new("python3").args(["-m", "venv"]).arg(&venv),
        );
        passes(
            &format!("pip install {PYTEST} {PSYCOPG} (PyPI must be reachable)"),
            Command::new(&python).args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                PYTEST,
                PSYCOPG,
            ]),
        );
        std::fs::write(&made, "").unwrap();
    }
    Some(python)
}

/// The first fenced block of `lang` in a page of the book, as written.
fn doc_example(page: &str, lang: &str) -> String {
    let doc = std::fs::read_to_string(workspace_root().join(page)).unwrap();
    let fence = format!("```{lang}\n");
    let start = doc
        .find(&fence)
        .unwrap_or_else(|| panic!("{page} has no {lang} block"))
        + fence.len();
    let len = doc[start..].find("```").expect("the block ends");
    doc[start..start + len].to_string()
}

/// What the store says of the race each client's tests ran (two callers,
/// one operation): one execution, completed once with the result the
/// executing caller returned, the other caller answered without executing;
/// and, over the whole store, no claim that lapsed (the long bodies were
/// kept by their heartbeats).
fn check_the_store(store: &TestStore, server: &Server, customer: &str, result: &str) {
    let op = json!({"kind": "charge", "tenant": "acme", "fields": {
        "customer": customer, "billing_period": "2026-11", "invoice_id": format!("{RUN}-race"),
        "amount": "100", "currency": "EUR"}});
    let key = server.ok("/v1/derive", &json!({"operation": op}))["key"]
        .as_str()
        .unwrap()
        .to_string();
    let (rt, handle) = store.open();
    let records = rt
        .block_on(handle.records().list(ListFilter::default()))
        .unwrap();
    let race = records
        .iter()
        .find(|v| v.record.key.digest.to_hex() == key)
        .unwrap_or_else(|| panic!("no record of the race ({key})"));
    assert_eq!(race.record.state, RecordState::Completed);
    assert_eq!(race.record.attempts, 1, "one claim of the race's key");
    let outcome = race.record.outcome.as_ref().expect("a completed outcome");
    assert_eq!(outcome.status, 0);
    assert_eq!(String::from_utf8_lossy(&outcome.body), result);
    assert!(
        records
            .iter()
            .all(|v| v.record.state != RecordState::OutcomeUnknown),
        "a claim lapsed and waits for review"
    );

    let log = rt
        .block_on(handle.records().attempts(AttemptFilter::default()))
        .unwrap();
    let events: Vec<&str> = log
        .iter()
        .filter(|e| e.key.digest.to_hex() == key)
        .map(|e| e.event.as_str())
        .collect();
    let count = |name: &str| events.iter().filter(|e| **e == name).count();
    assert_eq!(
        log.iter()
            .filter(|e| e.key.digest.to_hex() == key && e.event.starts_execution())
            .count(),
        1,
        "{events:?}"
    );
    assert_eq!(count("completed"), 1, "{events:?}");
    assert!(
        count("in-progress") + count("replayed") >= 1,
        "the other caller was answered: {events:?}"
    );
    assert!(
        log.iter().all(|e| e.event.as_str() != "marked-unknown"),
        "a claim lapsed"
    );
}

/// Runs a page's example twice against `server`, checking what each run
/// prints and that the store holds one charge of its invoice, claimed once.
fn run_the_example_twice(store: &TestStore, server: &Server, mut run: impl FnMut() -> String) {
    assert_eq!(run(), example_output(1), "the first run charges");
    assert_eq!(run(), example_output(0), "a re-run replays");
    let op = json!({"kind": "charge", "tenant": "acme", "fields": {
        "customer": "c1", "billing_period": "2026-11", "invoice_id": "i1",
        "amount": "100", "currency": "EUR"}});
    let key = server.ok("/v1/derive", &json!({"operation": op}))["key"]
        .as_str()
        .unwrap()
        .to_string();
    let (rt, handle) = store.open();
    let records = rt
        .block_on(handle.records().list(ListFilter::default()))
        .unwrap();
    let charged = records
        .iter()
        .find(|v| v.record.key.digest.to_hex() == key)
        .expect("the example's charge is recorded");
    assert_eq!(charged.record.state, RecordState::Completed);
    assert_eq!(charged.record.attempts, 1);
}

/// What a client page's example prints when this process charged `n` times.
fn example_output(n: usize) -> String {
    format!(
        "receipt for i1: 100 EUR\nthe second call returned the same receipt: yes\ncharges made by this process: {n}\n"
    )
}

#[test]
fn the_python_client_passes_its_tests_against_a_real_server() {
    let test = "the_python_client_passes_its_tests_against_a_real_server";
    let Some(python) = python_with_pytest(test) else {
        return;
    };
    let (store, server) = start();
    let package = workspace_root().join("clients/python");
    let report = passes(
        "the Python client's tests",
        against(&mut Command::new(&python), &server)
            // Its PostgreSQL tests run below, on a PostgreSQL store.
            .args(["-m", "pytest", "-p", "no:cacheprovider", "-v"])
            .arg("--ignore=tests/test_postgres.py")
            .env("PYTHONPATH", package.join("src"))
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .current_dir(&package),
    );
    assert!(
        report.contains(" passed") && !report.contains("skipped"),
        "{report}"
    );
    check_the_store(&store, &server, "c-py", "\"charged 1\"");

    let example = doc_example("docs/guide/client-python.md", "python");
    run_the_example_twice(&store, &server, || {
        passes(
            "the example of docs/guide/client-python.md",
            against(&mut Command::new(&python), &server)
                .args(["-c", &example])
                .env("PYTHONPATH", package.join("src"))
                .env("PYTHONDONTWRITEBYTECODE", "1"),
        )
    });
    postgres::python(test, &python, &package);
}

#[test]
fn the_typescript_client_passes_its_tests_against_a_real_server() {
    let test = "the_typescript_client_passes_its_tests_against_a_real_server";
    if !tool_available(test, "node") || !tool_available(test, "npm") {
        return;
    }
    let (store, server) = start();
    let package = workspace_root().join("clients/typescript");
    passes(
        "npm ci (the npm registry must be reachable)",
        Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund"])
            .current_dir(&package),
    );
    let report = passes(
        "npm test",
        against(&mut Command::new("npm"), &server)
            .arg("test")
            .current_dir(&package),
    );
    let pass = summary_count(&report, "# pass ");
    assert!(pass > 0, "{report}");
    assert_eq!(summary_count(&report, "# fail "), 0, "{report}");
    assert_eq!(summary_count(&report, "# skipped "), 0, "{report}");
    check_the_store(&store, &server, "c-ts", "\"charged 1\"");

    // The page's example is TypeScript that needs no annotation: it is
    // type-checked as TypeScript, then run as JavaScript. Both files sit in
    // the package's build output, where `@idem/client` resolves to the
    // package itself.
    let example = doc_example("docs/guide/client-typescript.md", "ts");
    let dir = package.join("dist-test").join("doc");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("example.ts"), &example).unwrap();
    std::fs::write(dir.join("example.mjs"), &example).unwrap();
    passes(
        "tsc on the example of docs/guide/client-typescript.md",
        Command::new(package.join("node_modules/.bin/tsc"))
            .args(tsc_strict())
            .arg(dir.join("example.ts"))
            .current_dir(&package),
    );
    run_the_example_twice(&store, &server, || {
        passes(
            "the example of docs/guide/client-typescript.md",
            against(&mut Command::new("node"), &server)
                .arg(dir.join("example.mjs"))
                .current_dir(&package),
        )
    });
    postgres::typescript(test, &package);
}

/// tsc's flags for a lone file, as strict as the package's own build.
fn tsc_strict() -> [&'static str; 10] {
    [
        "--noEmit",
        "--strict",
        "--target",
        "es2022",
        "--module",
        "nodenext",
        "--moduleResolution",
        "nodenext",
        "--types",
        "node",
    ]
}

/// The number after `prefix` on the line of node's test summary that starts
/// with it.
fn summary_count(report: &str, prefix: &str) -> usize {
    report
        .lines()
        .find_map(|l| l.strip_prefix(prefix))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no `{prefix}` line in node's report:\n{report}"))
}
