//! Each client's PostgreSQL helper (`idem_client.postgres`, the TypeScript
//! package's `completeIn`): the completion inside the caller's own
//! transaction, through the store's SQL function, against `idem serve` on
//! a fresh PostgreSQL schema and a connection of the client's own driver
//! to the same database (psycopg 3, node-postgres). Then the store is read:
//! every record the tests made is completed once, each completion logged
//! once, none waits for review.

use std::path::Path;
use std::process::Command;

use idem_store::{AttemptEvent, AttemptFilter, ListFilter, RecordState};
use idem_tests::postgres_url;

use super::{against, passes, start_on, summary_count};
use crate::serve::{Server, TestStore};

/// A server on a fresh schema of the test database, and what the clients'
/// PostgreSQL tests read to reach it: the database's URL and the schema.
fn start(test: &str) -> Option<(TestStore, Server, String, String)> {
    let url = postgres_url(test)?;
    let (store, server) = start_on(TestStore::postgres(&url));
    let schema = store
        .url
        .split(['?', '&'])
        .find_map(|p| p.strip_prefix("idem_schema="))
        .expect("the store URL names its schema")
        .to_string();
    Some((store, server, url, schema))
}

/// Points `command` at the database and schema of `server`'s store.
fn with_database<'c>(command: &'c mut Command, url: &str, schema: &str) -> &'c mut Command {
    command
        .env("IDEM_TEST_POSTGRES_URL", url)
        .env("IDEM_TEST_POSTGRES_SCHEMA", schema)
}

/// What the store holds after a client's PostgreSQL tests: `records`
/// records (one per test that claimed), each completed, with one
/// `completed` entry in the attempt log; the deposed holder's key under
/// the higher of its two fences, its refused write logged once.
fn check_the_store(store: &TestStore, records: usize) {
    let (rt, handle) = store.open();
    let found = rt
        .block_on(handle.records().list(ListFilter::default()))
        .unwrap();
    assert_eq!(found.len(), records, "{found:?}");
    let log = rt
        .block_on(handle.records().attempts(AttemptFilter::default()))
        .unwrap();
    for view in &found {
        let record = &view.record;
        assert_eq!(record.state, RecordState::Completed, "{record:?}");
        let completions: Vec<u64> = log
            .iter()
            .filter(|e| e.key == record.key && e.event == AttemptEvent::Completed)
            .map(|e| e.fence)
            .collect();
        assert_eq!(completions, [record.fence], "{record:?}");
    }
    let deposed = found
        .iter()
        .find(|v| v.record.attempts == 2)
        .expect("the deposed holder's key was taken over");
    let refused: Vec<u64> = log
        .iter()
        .filter(|e| e.key == deposed.record.key && e.event == AttemptEvent::Fenced)
        .map(|e| e.fence)
        .collect();
    assert_eq!(
        refused.len(),
        1,
        "the refused write is logged once (log_refusal)"
    );
    assert!(refused[0] < deposed.record.fence);
}

/// The Python package's `tests/test_postgres.py`.
pub(super) fn python(test: &str, python: &Path, package: &Path) {
    let Some((store, server, url, schema)) = start(test) else {
        return;
    };
    let report = passes(
        "the Python client's PostgreSQL tests",
        with_database(against(&mut Command::new(python), &server), &url, &schema)
            .args(["-m", "pytest", "-p", "no:cacheprovider", "-v"])
            .arg("tests/test_postgres.py")
            .env("PYTHONPATH", package.join("src"))
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .current_dir(package),
    );
    assert!(
        report.contains("5 passed") && !report.contains("skipped"),
        "{report}"
    );
    check_the_store(&store, 4);
}

/// The TypeScript package's `test/postgres.test.ts` (`npm run
/// test:postgres`, after `npm ci`).
pub(super) fn typescript(test: &str, package: &Path) {
    let Some((store, server, url, schema)) = start(test) else {
        return;
    };
    let report = passes(
        "npm run test:postgres",
        with_database(against(&mut Command::new("npm"), &server), &url, &schema)
            .args(["run", "test:postgres"])
            .current_dir(package),
    );
    assert_eq!(summary_count(&report, "# pass "), 4, "{report}");
    assert_eq!(summary_count(&report, "# fail "), 0, "{report}");
    assert_eq!(summary_count(&report, "# skipped "), 0, "{report}");
    check_the_store(&store, 3);
}
