//! Older SQLite files upgraded in place, the log across upgrades and while
//! switched off, gc's deletions, and the schema the migrations build
//! against its snapshot.

use super::*;

/// A version-1 file (records only, as the previous idem left it) is
/// upgraded in place on open: its records survive, and memberships, epochs
/// and job leases work.
#[tokio::test]
async fn a_version_1_file_is_upgraded_in_place() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("idem.db");
    let store = open(&path).expect("create");
    let k = conformance::key(1);
    let fence = match store
        .claim(request(&k, 1, 60_000, 60_000, 1))
        .await
        .expect("claim")
    {
        ClaimOutcome::Claimed(claim) => claim.fence,
        other => panic!("expected a claim, got {other:?}"),
    };
    drop(store);
    {
        // Back to version 1: exactly the objects later migrations add, gone
        // (the gate's entries included).
        let conn = rusqlite::Connection::open(&path).expect("open");
        conn.execute_batch(
            "ALTER TABLE records DROP COLUMN operation; DROP TABLE registrations; DROP TABLE policy_components; DROP TABLE settings; DROP TABLE attempts; DROP TABLE memberships; DROP TABLE job_leases; DROP TABLE epoch_seq; DROP TABLE gate_entries; DROP TABLE record_fields; DROP TABLE record_fields_mark; PRAGMA user_version = 1;",
        )
        .expect("downgrade");
    }
    let store = open(&path).expect("reopen");
    assert_eq!(
        store.schema_version().await.expect("version"),
        idem_store::SCHEMA_VERSION
    );
    let view = store
        .get(&k)
        .await
        .expect("get")
        .expect("the record survived");
    assert_eq!(view.record.fence, fence);
    assert_eq!(
        view.record.operation, None,
        "a record from before version 4 keeps none"
    );
    let m = store
        .join_membership("nightly", &["a".to_string()])
        .await
        .expect("join");
    assert_eq!(m.epoch, 1);
    match store
        .acquire_job_lease("nightly", "me", Duration::from_secs(60))
        .await
        .expect("acquire")
    {
        idem_store::JobLeaseAcquire::Acquired(lease) => assert!(lease.fence > fence),
        other => panic!("expected Acquired, got {other:?}"),
    }
}

/// A version-4 file (its attempt log indexed by key) is upgraded in place:
/// every record's timeline reads as before, through the record index, and
/// gc still removes a collected record's entries with it.
#[tokio::test]
async fn a_version_4_log_keeps_its_timelines_when_upgraded() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("idem.db");
    let clock = ManualClock::new(conformance::START_MS);
    let store = open_at(&path, &clock, true);
    for (n, retention_ms) in [(1, 60_000), (2, 1)] {
        let k = conformance::key(n);
        completed(&store, request(&k, 1, 60_000, retention_ms, 1)).await;
    }
    let timelines = |store: SqliteStore| async move {
        let mut out = Vec::new();
        for n in [1, 2] {
            let filter = AttemptFilter {
                key: Some(conformance::key(n)),
                ..AttemptFilter::default()
            };
            out.push(store.attempts(filter).await.expect("timeline"));
        }
        (store, out)
    };
    let (store, before) = timelines(store).await;
    assert_eq!(before.iter().map(Vec::len).collect::<Vec<_>>(), [2, 2]);
    drop(store);
    {
        // Back to version 4: the log indexed by key, no anchors, no gate.
        let conn = rusqlite::Connection::open(&path).expect("open");
        conn.execute_batch(
            "DROP INDEX attempts_by_record; ALTER TABLE attempts DROP COLUMN anchor; \
             CREATE INDEX attempts_by_key ON attempts (namespace, key); \
             DROP TABLE gate_entries; DROP TABLE record_fields; DROP TABLE record_fields_mark; PRAGMA user_version = 4;",
        )
        .expect("downgrade");
    }
    let store = open_at(&path, &clock, true);
    assert_eq!(
        store.schema_version().await.expect("version"),
        idem_store::SCHEMA_VERSION
    );
    let (store, after) = timelines(store).await;
    assert_eq!(after, before);
    // Key 2's record has expired: gc takes its entries, not key 1's.
    clock.advance(Duration::from_millis(5));
    assert_eq!(store.gc().await.expect("gc"), 1);
    let (_, collected) = timelines(store).await;
    assert_eq!(collected, vec![before[0].clone(), Vec::new()]);
}

/// Entries written while the log was on stay with their key when the log
/// is switched off: a fresh record replacing the expired one keeps them in
/// its timeline, and gc removes them with it.
#[tokio::test]
async fn entries_follow_their_key_after_the_log_is_switched_off() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("idem.db");
    let clock = ManualClock::new(conformance::START_MS);
    let k = conformance::key(1);
    let timeline = AttemptFilter {
        key: Some(k.clone()),
        ..AttemptFilter::default()
    };
    let logging = open_at(&path, &clock, true);
    completed(&logging, request(&k, 1, 100, 1_000, 1)).await;
    drop(logging);

    let quiet = open_at(&path, &clock, false);
    clock.advance(Duration::from_secs(2));
    let fence = claimed_fence(&quiet, request(&k, 1, 100, 1_000, 2)).await;
    let entries = quiet.attempts(timeline).await.expect("timeline");
    assert_eq!(entries.len(), 2, "the first record's entries");
    quiet
        .complete(&k, fence, Outcome::new(0, "again"))
        .await
        .expect("complete");
    clock.advance(Duration::from_secs(2));
    assert_eq!(quiet.gc().await.expect("gc"), 1);
    let everything = quiet
        .attempts(AttemptFilter::default())
        .await
        .expect("the log");
    assert_eq!(everything, Vec::new(), "collected with the record");
}

/// gc copies the log it grew back into the database file before it
/// returns (its own checkpoint, not the next claim's): a copy of the file
/// alone, without its write-ahead log, already shows the records kept and
/// none of the collected.
#[tokio::test]
async fn gc_leaves_its_deletions_in_the_database_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("idem.db");
    let clock = ManualClock::new(conformance::START_MS);
    let store = open_at(&path, &clock, true);
    // 40 records retained for a second, 3 for a day: well under the
    // automatic checkpoint's thousand pages.
    for n in 0..43 {
        let k = conformance::key(n);
        let retention = if n < 40 { 1_000 } else { 86_400_000 };
        completed(&store, request(&k, 1, 100, retention, 1)).await;
    }
    clock.advance(Duration::from_secs(2));
    assert_eq!(store.gc().await.expect("gc"), 40);

    let copy = dir.path().join("copy.db");
    std::fs::copy(&path, &copy).expect("copy the database file alone");
    let conn = rusqlite::Connection::open(&copy).expect("open the copy");
    let (records, entries): (i64, i64) = conn
        .query_row(
            "SELECT (SELECT count(*) FROM records), (SELECT count(*) FROM attempts)",
            [],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .expect("the file alone has the store's tables");
    assert_eq!((records, entries), (3, 6), "kept records and their entries");
    // Open until here: closing the connection would checkpoint anyway.
    drop(store);
}

/// The schema of a store file, in a form that compares across builds:
/// every object's SQL with its whitespace collapsed, and the version and
/// application id.
fn schema_of(path: &Path) -> String {
    let conn = rusqlite::Connection::open(path).expect("open");
    let mut out = String::new();
    let mut stmt = conn
        .prepare("SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY type, name")
        .expect("prepare");
    let rows = stmt
        .query_map([], |row| {
            Ok((
                row.get::<_, String>(0)?,
                row.get::<_, String>(1)?,
                row.get::<_, String>(2)?,
                row.get::<_, Option<String>>(3)?.unwrap_or_default(),
            ))
        })
        .expect("query");
    for row in rows {
        let (kind, name, table, sql) = row.expect("row");
        let sql = sql.split_whitespace().collect::<Vec<_>>().join(" ");
        out.push_str(&format!("{kind} {name} on {table}: {sql}\n"));
    }
    for pragma in ["user_version", "application_id"] {
        let value: i64 = conn
            .pragma_query_value(None, pragma, |row| row.get(0))
            .expect("pragma");
        out.push_str(&format!("{pragma} = {value}\n"));
    }
    out
}

/// Where the schema snapshot of the current version is kept: made by the
/// build that introduced that version (see `write_the_schema_snapshot`).
const SQLITE_SNAPSHOT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/schema-sqlite.txt"
);

/// The migration files build exactly the schema that the build which
/// introduced the current version built (the snapshot), so a file that
/// build made opens as current and is never migrated again.
#[tokio::test]
async fn the_migrations_build_the_snapshotted_schema() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("idem.db");
    drop(open(&path).expect("create"));
    let expected = std::fs::read_to_string(SQLITE_SNAPSHOT).expect("the snapshot");
    assert_eq!(schema_of(&path), expected);
    assert!(expected.contains(&format!("user_version = {}\n", idem_store::SCHEMA_VERSION)));
}

/// Writes the snapshot from the store file `IDEM_SCHEMA_SNAPSHOT_FROM`
/// names: run once, against a file made by the build that introduced a new
/// schema version. Ignored: it writes a fixture, it tests nothing.
#[test]
#[ignore]
fn write_the_schema_snapshot() {
    let from = std::env::var("IDEM_SCHEMA_SNAPSHOT_FROM").expect("IDEM_SCHEMA_SNAPSHOT_FROM");
    std::fs::write(SQLITE_SNAPSHOT, schema_of(Path::new(&from))).expect("write the snapshot");
}
