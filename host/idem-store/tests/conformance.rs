//! Runs the conformance suite against the memory, SQLite and (with
//! `IDEM_TEST_POSTGRES_URL`) PostgreSQL stores, the SQL stores also behind
//! `GroupCommit`, plus SQLite-specific tests: opening bad files, schema
//! versions, and real concurrent connections racing on one file.

use std::path::Path;
use std::sync::{Arc, Barrier};
use std::time::Duration;

use idem_store::conformance::{self, memory_factory, request, sqlite_factory};
use idem_store::{
    AttemptFilter, ClaimOutcome, ManualClock, OpenErrorKind, Outcome, RecordState, SqliteOptions,
    SqliteStore, Store, StoreError, StoreOptions, StoreUrl, Synchronous,
};

macro_rules! conformance {
    ($($check:ident),* $(,)?) => {
        mod memory {
            $(
                #[tokio::test]
                async fn $check() {
                    idem_store::conformance::$check(&idem_store::conformance::memory_factory()).await;
                }
            )*
        }
        mod sqlite {
            $(
                #[tokio::test]
                async fn $check() {
                    let factory = idem_store::conformance::sqlite_factory(Default::default());
                    idem_store::conformance::$check(&factory).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test]
                async fn $check() {
                    let Some(url) = idem_store::conformance::postgres_test_url(concat!("postgres::", stringify!($check))) else {
                        return;
                    };
                    let factory = idem_store::conformance::postgres_factory(url);
                    idem_store::conformance::$check(&factory).await;
                }
            )*
        }
        // The same checks through a group commit (concurrent claims and
        // finishes sharing store calls): no check may tell the difference.
        mod sqlite_grouped {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $check() {
                    let factory = idem_store::conformance::grouped(
                        idem_store::conformance::sqlite_factory(Default::default()),
                    );
                    idem_store::conformance::$check(&factory).await;
                }
            )*
        }
        mod postgres_grouped {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $check() {
                    let Some(url) = idem_store::conformance::postgres_test_url(concat!("postgres_grouped::", stringify!($check))) else {
                        return;
                    };
                    let factory = idem_store::conformance::grouped(
                        idem_store::conformance::postgres_factory(url),
                    );
                    idem_store::conformance::$check(&factory).await;
                }
            )*
        }
    };
}

// One test per check and store, from the one list of checks.
idem_store::for_each_conformance_check!(conformance);

/// The names in [`idem_store::for_each_conformance_check!`], as strings.
macro_rules! check_names {
    ($($check:ident),* $(,)?) => {
        [$(stringify!($check)),*]
    };
}

/// Every public check in `src/conformance/` (a `pub async fn` taking only a
/// factory) is in the list of checks, once, and the list names nothing else:
/// a check left out of the list would run nowhere.
#[test]
fn every_check_is_listed_once() {
    let listed = idem_store::for_each_conformance_check!(check_names);
    let mut unique: Vec<&str> = listed.to_vec();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(
        unique.len(),
        listed.len(),
        "a check listed twice: {listed:?}"
    );
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/conformance");
    let mut defined = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("read src/conformance") {
        let path = entry.expect("entry").path();
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let source = std::fs::read_to_string(&path).expect("read a source file");
        defined.extend(source.lines().filter_map(|line| {
            line.strip_prefix("pub async fn ")?
                .strip_suffix("<F, Fut>(factory: &F)")
                .map(str::to_string)
        }));
    }
    defined.sort_unstable();
    assert!(!defined.is_empty(), "no checks found in {}", dir.display());
    assert_eq!(
        defined, unique,
        "the checks defined in src/conformance/ and those in for_each_conformance_check! differ"
    );
}

#[tokio::test]
async fn run_all_covers_both_stores() {
    conformance::run_all(&memory_factory()).await;
    conformance::run_all(&sqlite_factory(SqliteOptions::default())).await;
}

#[test]
fn model_memory() {
    conformance::model::check(memory_factory(), 256);
}

#[test]
fn model_sqlite() {
    conformance::model::check(conformance::sqlite_fast_factory(), 64);
}

#[test]
fn model_sqlite_connection_per_worker() {
    conformance::model::check_across_connections(conformance::sqlite_fast_factory(), 32);
}

/// The model-based test through a group commit: concurrent workers'
/// claims and finishes share store calls, and every step still matches the
/// reference model.
#[test]
fn model_sqlite_grouped() {
    conformance::model::check(conformance::grouped(conformance::sqlite_fast_factory()), 64);
}

#[test]
fn model_postgres_grouped() {
    let Some(url) = conformance::postgres_test_url("model_postgres_grouped") else {
        return;
    };
    conformance::model::check(conformance::grouped(conformance::postgres_factory(url)), 32);
}

#[test]
fn model_postgres() {
    let Some(url) = conformance::postgres_test_url("model_postgres") else {
        return;
    };
    conformance::model::check(conformance::postgres_factory(url), 32);
}

#[test]
fn model_postgres_connection_per_worker() {
    let Some(url) = conformance::postgres_test_url("model_postgres_connection_per_worker") else {
        return;
    };
    conformance::model::check_across_connections(conformance::postgres_factory(url), 16);
}

fn open(path: &Path) -> Result<SqliteStore, StoreError> {
    SqliteStore::open(path, SqliteOptions::default(), StoreOptions::default())
}

/// The store at `path` on a manual clock, writing the attempt log or not.
fn open_at(path: &Path, clock: &ManualClock, attempt_log: bool) -> SqliteStore {
    SqliteStore::open(
        path,
        SqliteOptions::default(),
        StoreOptions {
            clock: clock.store_clock(),
            attempt_log,
            ..StoreOptions::default()
        },
    )
    .expect("open")
}

/// The fence of a claim that must be fresh.
async fn claimed_fence(store: &SqliteStore, request: idem_store::ClaimRequest) -> u64 {
    match store.claim(request).await.expect("claim") {
        ClaimOutcome::Claimed(claim) => claim.fence,
        other => panic!("expected a claim, got {other:?}"),
    }
}

/// A fresh claim of `request`, completed with the body "done".
async fn completed(store: &SqliteStore, request: idem_store::ClaimRequest) {
    let key = request.key.clone();
    let fence = claimed_fence(store, request).await;
    store
        .complete(&key, fence, Outcome::new(0, "done"))
        .await
        .expect("complete");
}

fn open_kind(path: &Path) -> OpenErrorKind {
    match open(path) {
        Err(StoreError::Open { kind, .. }) => kind,
        other => panic!(
            "expected an open error for {}, got {other:?}",
            path.display()
        ),
    }
}

/// Every file in `dir`, with its bytes: to show that nothing was written.
fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .expect("read dir")
        .map(|e| {
            let e = e.expect("entry");
            let bytes = if e.path().is_file() {
                std::fs::read(e.path()).expect("read")
            } else {
                Vec::new()
            };
            (e.file_name().to_string_lossy().into_owned(), bytes)
        })
        .collect();
    files.sort();
    files
}

#[test]
fn a_directory_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let before = snapshot(dir.path());
    assert_eq!(open_kind(dir.path()), OpenErrorKind::IsADirectory);
    let err = open(dir.path()).unwrap_err().to_string();
    assert!(
        err.contains(&dir.path().display().to_string()) && err.contains("directory"),
        "{err}"
    );
    assert_eq!(snapshot(dir.path()), before);
}

#[test]
fn a_file_that_is_not_a_database_is_refused_untouched() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("notes.db");
    std::fs::write(
        &path,
        "these are my notes, not a database, but long enough to have a header".repeat(20),
    )
    .expect("write");
    let before = snapshot(dir.path());
    assert_eq!(open_kind(&path), OpenErrorKind::NotADatabase);
    assert_eq!(
        snapshot(dir.path()),
        before,
        "nothing written, no -wal or -shm file"
    );
}

#[test]
fn another_applications_database_is_refused_untouched() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("other.db");
    {
        let conn = rusqlite::Connection::open(&path).expect("open");
        conn.execute_batch(
            "CREATE TABLE accounts (id INTEGER PRIMARY KEY); INSERT INTO accounts VALUES (1);",
        )
        .expect("create");
    }
    let before = snapshot(dir.path());
    assert_eq!(open_kind(&path), OpenErrorKind::NotAnIdemStore);
    assert_eq!(snapshot(dir.path()), before);
}

#[test]
fn a_missing_directory_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("no/such/dir/idem.db");
    assert_eq!(open_kind(&path), OpenErrorKind::Unreadable);
    let text = open(&path).expect_err("an error").to_string();
    assert!(
        text.contains("does not exist") && text.contains("no/such/dir"),
        "{text}"
    );
    assert!(!dir.path().join("no").exists());
}

#[test]
fn a_read_only_file_is_refused_untouched() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("idem.db");
    drop(open(&path).expect("create a store"));
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o444)).expect("chmod");
    if std::fs::OpenOptions::new().write(true).open(&path).is_ok() {
        // Root ignores file modes: a read-only *connection* stands in.
        let conn = rusqlite::Connection::open_with_flags(
            &path,
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
        )
        .expect("open read-only");
        assert!(conn.is_readonly(rusqlite::MAIN_DB).expect("is_readonly"));
        eprintln!("running as root: file modes are not enforced, skipping the open check");
        return;
    }
    let before = snapshot(dir.path());
    assert_eq!(open_kind(&path), OpenErrorKind::ReadOnly);
    assert_eq!(snapshot(dir.path()), before);
}

#[test]
fn a_newer_schema_is_refused_untouched() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("idem.db");
    drop(open(&path).expect("create a store"));
    {
        let conn = rusqlite::Connection::open(&path).expect("open");
        conn.execute_batch(&format!(
            "PRAGMA user_version = {}",
            idem_store::SCHEMA_VERSION + 1
        ))
        .expect("bump");
    }
    let before = snapshot(dir.path());
    match open(&path) {
        Err(err @ StoreError::SchemaTooNew { .. }) => {
            let text = err.to_string();
            assert!(
                text.contains(&format!(
                    "schema version {}",
                    idem_store::SCHEMA_VERSION + 1
                )) && text.contains("upgrade idem"),
                "{text}"
            );
        }
        other => panic!("expected SchemaTooNew, got {other:?}"),
    }
    assert_eq!(snapshot(dir.path()), before);
}

#[tokio::test]
async fn a_new_file_is_migrated_to_the_current_schema_in_wal_mode() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("idem.db");
    let store = open(&path).expect("open");
    assert_eq!(
        store.schema_version().await.expect("version"),
        idem_store::SCHEMA_VERSION
    );
    drop(store);
    let conn = rusqlite::Connection::open(&path).expect("open");
    let mode: String = conn
        .pragma_query_value(None, "journal_mode", |r| r.get(0))
        .expect("journal_mode");
    assert_eq!(mode, "wal");
    // Reopening an up-to-date store is fine.
    drop(open(&path).expect("reopen"));
}

#[tokio::test]
async fn synchronous_is_full_unless_the_url_says_normal() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (query, expected) in [
        ("", Synchronous::Full),
        ("?synchronous=normal", Synchronous::Normal),
    ] {
        let url = format!("sqlite:{}{query}", dir.path().join("s.db").display());
        let StoreUrl::Sqlite { path, options } = url.parse().expect("a sqlite URL") else {
            panic!("{url} is not a sqlite URL")
        };
        let store = SqliteStore::open(&path, options, StoreOptions::default()).expect("open");
        assert_eq!(
            store.synchronous().await.expect("synchronous"),
            expected,
            "{url}"
        );
    }
}

#[tokio::test]
async fn store_urls_open_stores() {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!(
        "sqlite://{}?synchronous=normal",
        dir.path().join("u.db").display()
    );
    let store = idem_store::open(&url, StoreOptions::default())
        .await
        .expect("open sqlite url");
    assert!(store.describe().starts_with("sqlite:"));
    let memory = idem_store::open("memory:", StoreOptions::default())
        .await
        .expect("open memory");
    assert_eq!(memory.describe(), "memory:");
    let err = idem_store::open("redis://localhost", StoreOptions::default())
        .await
        .err()
        .expect("an error");
    assert!(err.to_string().contains("`redis://localhost`"), "{err}");
    let dir_url = format!("sqlite:{}", dir.path().display());
    assert!(matches!(
        idem_store::open(&dir_url, StoreOptions::default()).await,
        Err(StoreError::Open {
            kind: OpenErrorKind::IsADirectory,
            ..
        })
    ));
}

/// Separate connections (each its own store, as separate processes would
/// have), on separate OS threads, race to open a brand-new file and claim
/// the same key: every open succeeds and exactly one claim wins.
#[test]
fn racing_connections_claim_exactly_once() {
    const RACERS: usize = 8;
    for round in 0..5 {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = Arc::new(dir.path().join("race.db"));
        let barrier = Arc::new(Barrier::new(RACERS));
        let handles: Vec<_> = (0..RACERS)
            .map(|who| {
                let (path, barrier) = (path.clone(), barrier.clone());
                std::thread::spawn(move || {
                    let runtime = tokio::runtime::Builder::new_current_thread()
                        .build()
                        .expect("runtime");
                    barrier.wait();
                    let opened = open(&path);
                    // Everyone reaches the second barrier, even after a
                    // failed open, so a failure cannot hang the test.
                    barrier.wait();
                    let store = opened.map_err(|e| format!("open: {e}"))?;
                    let k = conformance::key(round);
                    runtime
                        .block_on(store.claim(request(&k, 1, 60_000, 60_000, who as u32)))
                        .map_err(|e| format!("claim: {e}"))
                })
            })
            .collect();
        let outcomes: Vec<ClaimOutcome> = handles
            .into_iter()
            .map(|h| h.join().expect("racer").expect("open and claim"))
            .collect();
        let winners: Vec<_> = outcomes
            .iter()
            .filter_map(|o| match o {
                ClaimOutcome::Claimed(c) => Some(c.fence),
                ClaimOutcome::Existing(_) => None,
            })
            .collect();
        assert_eq!(winners.len(), 1, "round {round}: {outcomes:?}");
        for o in &outcomes {
            if let ClaimOutcome::Existing(e) = o {
                assert_eq!(
                    e.view.record.fence, winners[0],
                    "losers see the winner's record"
                );
            }
        }
    }
}

/// Racing take-overs of one expired lease through separate connections:
/// exactly one wins, the others are fenced.
#[test]
fn racing_take_overs_have_one_winner() {
    const RACERS: usize = 6;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("race.db");
    let clock = ManualClock::new(conformance::START_MS);
    let options = || StoreOptions {
        clock: clock.store_clock(),
        ..StoreOptions::default()
    };
    let k = conformance::key(1);
    let first = {
        let store = SqliteStore::open(&path, SqliteOptions::default(), options()).expect("open");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        match runtime
            .block_on(store.claim(request(&k, 1, 1_000, 60_000, 0)))
            .expect("claim")
        {
            ClaimOutcome::Claimed(c) => c,
            other => panic!("expected a claim, got {other:?}"),
        }
    };
    clock.advance(Duration::from_millis(1_000));
    let barrier = Arc::new(Barrier::new(RACERS));
    let handles: Vec<_> = (0..RACERS)
        .map(|who| {
            let (path, barrier, k, store_options) =
                (path.clone(), barrier.clone(), k.clone(), options());
            std::thread::spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .build()
                    .expect("runtime");
                let store = SqliteStore::open(&path, SqliteOptions::default(), store_options)
                    .expect("open");
                barrier.wait();
                runtime.block_on(store.take_over(
                    &k,
                    first.fence,
                    Duration::from_millis(1_000),
                    conformance::holder(who as u32),
                ))
            })
        })
        .collect();
    let results: Vec<_> = handles
        .into_iter()
        .map(|h| h.join().expect("racer"))
        .collect();
    let winners: Vec<_> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
    assert_eq!(winners.len(), 1, "{results:?}");
    for r in &results {
        match r {
            Ok(c) => assert!(c.fence > first.fence && c.attempt == 2),
            Err(StoreError::Fenced { current, .. }) => assert_eq!(*current, winners[0].fence),
            Err(other) => panic!("unexpected {other}"),
        }
    }
}

/// A record written through one connection is seen, and fenced, through
/// another: the state lives in the file, not in a connection.
#[tokio::test]
async fn two_connections_share_fences() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("shared.db");
    let clock = ManualClock::new(conformance::START_MS);
    let options = || StoreOptions {
        clock: clock.store_clock(),
        ..StoreOptions::default()
    };
    let a = SqliteStore::open(&path, SqliteOptions::default(), options()).expect("open a");
    let b = SqliteStore::open(&path, SqliteOptions::default(), options()).expect("open b");
    let k = conformance::key(1);
    let ClaimOutcome::Claimed(claim) = a
        .claim(request(&k, 1, 1_000, 60_000, 1))
        .await
        .expect("claim")
    else {
        panic!("expected a claim")
    };
    clock.advance(Duration::from_millis(1_000));
    let taken = b
        .take_over(
            &k,
            claim.fence,
            Duration::from_millis(1_000),
            conformance::holder(2),
        )
        .await
        .expect("take");
    match a
        .complete(&k, claim.fence, Outcome::new(200, Vec::new()))
        .await
    {
        Err(StoreError::Fenced { current, .. }) => assert_eq!(current, taken.fence),
        other => panic!("expected Fenced, got {other:?}"),
    }
    b.complete(&k, taken.fence, Outcome::new(200, b"ok".to_vec()))
        .await
        .expect("complete");
    let seen = a.get(&k).await.expect("get").expect("record");
    assert_eq!(
        (seen.record.state, seen.record.fence),
        (RecordState::Completed, taken.fence)
    );
}

/// The child side of [`processes_race_claims_exactly_once`]: opens the store
/// named by the environment, says `ready`, waits for `go` on stdin, claims
/// and reports.
#[test]
#[ignore = "a child process of processes_race_claims_exactly_once"]
fn race_child() {
    let path = std::env::var(RACE_CHILD_ENV).expect("run by processes_race_claims_exactly_once");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let store = match open(Path::new(&path)) {
        Ok(store) => store,
        Err(e) => {
            println!("RACE:error open: {e}");
            return;
        }
    };
    println!("RACE:ready");
    let mut go = String::new();
    std::io::stdin().read_line(&mut go).expect("read go");
    let k = conformance::key(0);
    match runtime.block_on(store.claim(request(&k, 1, 60_000, 60_000, std::process::id()))) {
        Ok(ClaimOutcome::Claimed(c)) => println!("RACE:claimed {}", c.fence),
        Ok(ClaimOutcome::Existing(e)) => println!("RACE:existing {}", e.view.record.fence),
        Err(e) => println!("RACE:error claim: {e}"),
    }
}

const RACE_CHILD_ENV: &str = "IDEM_STORE_RACE_CHILD_DB";

/// Separate processes open a brand-new file at once, then race to claim one
/// key (released together through their stdin): exactly one wins.
#[test]
fn processes_race_claims_exactly_once() {
    use std::io::{BufRead, BufReader, Write};
    use std::process::{Command, Stdio};
    const PROCESSES: usize = 4;
    let exe = std::env::current_exe().expect("the test binary");
    for round in 0..3 {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("processes.db");
        let mut children: Vec<_> = (0..PROCESSES)
            .map(|_| {
                Command::new(&exe)
                    .args([
                        "race_child",
                        "--exact",
                        "--ignored",
                        "--nocapture",
                        "--test-threads=1",
                    ])
                    .env(RACE_CHILD_ENV, &path)
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::inherit())
                    .spawn()
                    .expect("spawn a child")
            })
            .collect();
        let mut readers: Vec<_> = children
            .iter_mut()
            .map(|c| BufReader::new(c.stdout.take().expect("child stdout")))
            .collect();
        // Reads a child's stdout up to its next `RACE:` line.
        let next = |reader: &mut BufReader<std::process::ChildStdout>| -> String {
            let mut line = String::new();
            loop {
                line.clear();
                let n = reader.read_line(&mut line).expect("read child stdout");
                assert!(n > 0, "round {round}: a child exited without reporting");
                // The harness may print `test race_child ... ` first.
                if let Some(at) = line.find("RACE:") {
                    return line[at + "RACE:".len()..].trim().to_string();
                }
            }
        };
        for reader in &mut readers {
            assert_eq!(next(reader), "ready", "round {round}");
        }
        for child in &mut children {
            let mut stdin = child.stdin.take().expect("child stdin");
            writeln!(stdin, "go").expect("release a child");
        }
        let reports: Vec<String> = readers.iter_mut().map(next).collect();
        for mut child in children {
            assert!(
                child.wait().expect("wait").success(),
                "round {round}: a child failed"
            );
        }
        let claimed: Vec<&String> = reports
            .iter()
            .filter(|r| r.starts_with("claimed "))
            .collect();
        assert_eq!(claimed.len(), 1, "round {round}: {reports:?}");
        let fence = claimed[0].trim_start_matches("claimed ");
        for report in &reports {
            assert!(
                report == claimed[0] || report == &format!("existing {fence}"),
                "round {round}: {reports:?}"
            );
        }
    }
}

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
        // Back to version 1: exactly the objects migrations 2 to 4 add, gone.
        let conn = rusqlite::Connection::open(&path).expect("open");
        conn.execute_batch(
            "ALTER TABLE records DROP COLUMN operation; DROP TABLE registrations; DROP TABLE policy_components; DROP TABLE settings; DROP TABLE attempts; DROP TABLE memberships; DROP TABLE job_leases; DROP TABLE epoch_seq; PRAGMA user_version = 1;",
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
        // Back to version 4: the log indexed by key, no anchors.
        let conn = rusqlite::Connection::open(&path).expect("open");
        conn.execute_batch(
            "DROP INDEX attempts_by_record; ALTER TABLE attempts DROP COLUMN anchor; \
             CREATE INDEX attempts_by_key ON attempts (namespace, key); PRAGMA user_version = 4;",
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

/// Waits (polling) until `ready` holds; panics after a minute, naming
/// `what`, so that a broken group commit fails the test instead of hanging
/// it. Not a timing assertion: the condition is what is checked.
async fn until(what: &str, mut ready: impl FnMut() -> bool) {
    let give_up = std::time::Instant::now() + Duration::from_secs(60);
    while !ready() {
        assert!(
            std::time::Instant::now() < give_up,
            "gave up waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Group commit, seen from outside on a real SQLite file: while one claim's
/// commit is held up (another connection holds the write lock), every other
/// caller waits in line, and all of them then go in *one* store call; each
/// gets its own answer (a key asked twice in the batch: one claim, one
/// duplicate), fences are distinct, and finishes group the same way, each
/// conditional on its own fence (a stale one is refused alone).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_commit_sends_the_waiting_callers_in_one_call() {
    use idem_store::{ClaimRequest, GroupCommit, GroupCommitOptions};

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idem.db");
    let sqlite = SqliteOptions {
        busy_timeout: Duration::from_secs(60),
        ..SqliteOptions::default()
    };
    let inner = SqliteStore::open(&path, sqlite, StoreOptions::default()).unwrap();
    let grouped = Arc::new(GroupCommit::new(
        Arc::new(inner),
        GroupCommitOptions::default(),
    ));
    let store: Arc<dyn Store> = grouped.clone();
    let lock = |c: &rusqlite::Connection| c.execute_batch("BEGIN IMMEDIATE").unwrap();
    let blocker = rusqlite::Connection::open(&path).unwrap();

    // Keys 0..20, and key 7 asked for a second time by another worker.
    let requests: Vec<ClaimRequest> = (0..20u32)
        .map(|n| request(&conformance::key(n), n, 60_000, 600_000, n))
        .chain([request(&conformance::key(7), 7, 60_000, 600_000, 99)])
        .collect();
    lock(&blocker);
    let claim = |r: ClaimRequest| {
        let store = store.clone();
        tokio::spawn(async move { store.claim(r).await })
    };
    let mut tasks = vec![claim(requests[0].clone())];
    until("the first claim to be sent", || {
        grouped.stats().claims.calls == 1
    })
    .await;
    tasks.extend(requests[1..].iter().cloned().map(claim));
    until("the other claims to wait in line", || {
        grouped.stats().claims.waiting == requests.len() - 1
    })
    .await;
    blocker.execute_batch("COMMIT").unwrap();
    let mut claims = Vec::new();
    let mut duplicates = 0;
    for task in tasks {
        match task.await.unwrap().unwrap() {
            ClaimOutcome::Claimed(c) => claims.push(c),
            ClaimOutcome::Existing(e) => {
                assert_eq!(e.view.record.key, conformance::key(7));
                duplicates += 1;
            }
        }
    }
    assert_eq!((claims.len(), duplicates), (20, 1));
    let stats = grouped.stats().claims;
    assert_eq!(
        (stats.calls, stats.items),
        (2, 21),
        "one lone call, then one call for everyone who waited"
    );
    let mut fences: Vec<u64> = claims.iter().map(|c| c.fence).collect();
    fences.sort_unstable();
    fences.dedup();
    assert_eq!(fences.len(), 20, "every claim under a fence of its own");

    // Finishes: the first held up, the rest in one call; one of them with a
    // stale fence is refused alone.
    lock(&blocker);
    let finish = |key: idem_store::RecordKey, fence: u64| {
        let store = store.clone();
        tokio::spawn(async move {
            store
                .complete(&key, fence, Outcome::new(0, b"ok".to_vec()))
                .await
        })
    };
    let mut tasks = vec![finish(claims[0].key.clone(), claims[0].fence)];
    until("the first finish to be sent", || {
        grouped.stats().finishes.calls == 1
    })
    .await;
    for (i, c) in claims.iter().enumerate().skip(1) {
        let fence = if i == 3 { c.fence - 1 } else { c.fence };
        tasks.push(finish(c.key.clone(), fence));
    }
    until("the other finishes to wait in line", || {
        grouped.stats().finishes.waiting == claims.len() - 1
    })
    .await;
    blocker.execute_batch("COMMIT").unwrap();
    for (i, task) in tasks.into_iter().enumerate() {
        let result = task.await.unwrap();
        if i == 3 {
            assert!(
                matches!(result, Err(StoreError::Fenced { .. })),
                "the stale fence is refused: {result:?}"
            );
        } else {
            result.unwrap();
        }
    }
    let stats = grouped.stats().finishes;
    assert_eq!((stats.calls, stats.items), (2, 20));
    for (i, c) in claims.iter().enumerate() {
        let state = store.get(&c.key).await.unwrap().unwrap().record.state;
        let expected = if i == 3 {
            RecordState::InProgress
        } else {
            RecordState::Completed
        };
        assert_eq!(state, expected, "claim {i}");
    }
}

/// A caller that gives up while it waits in line is left out of the batch:
/// nothing is written for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_commit_leaves_out_a_caller_that_gave_up() {
    use idem_store::{GroupCommit, GroupCommitOptions};

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idem.db");
    let sqlite = SqliteOptions {
        busy_timeout: Duration::from_secs(60),
        ..SqliteOptions::default()
    };
    let inner = SqliteStore::open(&path, sqlite, StoreOptions::default()).unwrap();
    let grouped = Arc::new(GroupCommit::new(
        Arc::new(inner),
        GroupCommitOptions::default(),
    ));
    let store: Arc<dyn Store> = grouped.clone();
    let blocker = rusqlite::Connection::open(&path).unwrap();
    blocker.execute_batch("BEGIN IMMEDIATE").unwrap();
    let claim = |n: u32| {
        let store = store.clone();
        tokio::spawn(async move {
            store
                .claim(request(&conformance::key(n), n, 60_000, 600_000, n))
                .await
        })
    };
    let first = claim(0);
    until("the first claim to be sent", || {
        grouped.stats().claims.calls == 1
    })
    .await;
    let kept = claim(1);
    let abandoned = claim(2);
    until("two claims to wait in line", || {
        grouped.stats().claims.waiting == 2
    })
    .await;
    abandoned.abort();
    let _ = abandoned.await;
    blocker.execute_batch("COMMIT").unwrap();
    assert!(matches!(
        first.await.unwrap().unwrap(),
        ClaimOutcome::Claimed(_)
    ));
    assert!(matches!(
        kept.await.unwrap().unwrap(),
        ClaimOutcome::Claimed(_)
    ));
    assert!(
        store.get(&conformance::key(2)).await.unwrap().is_none(),
        "nothing written for the caller that gave up"
    );
    assert_eq!(grouped.stats().claims.items, 2);
}

/// On one writer (SQLite: [`Store::mixes_writes`]) claims and finishes
/// wait in one line (a caller's own small `claim_many` too): those that
/// queued together while a call was held up go in *one* store call (one
/// commit), each with its own answer — fresh
/// claims under new fences above every earlier one, finishes each
/// conditional on its own fence (a stale one refused alone).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_commit_sends_waiting_claims_and_finishes_together_on_one_writer() {
    use idem_store::{GroupCommit, GroupCommitOptions};

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idem.db");
    let sqlite = SqliteOptions {
        busy_timeout: Duration::from_secs(60),
        ..SqliteOptions::default()
    };
    let inner = SqliteStore::open(&path, sqlite, StoreOptions::default()).unwrap();
    assert!(inner.mixes_writes(), "SQLite has one writer");
    let grouped = Arc::new(GroupCommit::new(
        Arc::new(inner),
        GroupCommitOptions::default(),
    ));
    let store: Arc<dyn Store> = grouped.clone();
    let claim = |n: u32| {
        let store = store.clone();
        tokio::spawn(async move {
            store
                .claim(request(&conformance::key(n), n, 60_000, 600_000, n))
                .await
        })
    };
    // Six claims made one by one: their holders finish later.
    let mut held = Vec::new();
    for n in 0..6 {
        match claim(n).await.unwrap().unwrap() {
            ClaimOutcome::Claimed(c) => held.push(c),
            other => panic!("a fresh key is claimed: {other:?}"),
        }
    }
    let highest = held.iter().map(|c| c.fence).max().unwrap();
    let before = grouped.stats();

    let blocker = rusqlite::Connection::open(&path).unwrap();
    blocker.execute_batch("BEGIN IMMEDIATE").unwrap();
    let first = claim(100);
    until("the first claim to be sent", || {
        grouped.stats().calls == before.calls + 1
    })
    .await;
    let claims: Vec<_> = (101..105).map(claim).collect();
    // A job's own small batch joins the same line.
    let batch = {
        let store = store.clone();
        let requests = (105..107)
            .map(|n| request(&conformance::key(n), n, 60_000, 600_000, n))
            .collect();
        tokio::spawn(async move { store.claim_many(requests).await })
    };
    let finishes: Vec<_> = held
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let (store, key) = (store.clone(), c.key.clone());
            let fence = if i == 2 { c.fence - 1 } else { c.fence };
            tokio::spawn(async move {
                store
                    .complete(&key, fence, Outcome::new(0, b"ok".to_vec()))
                    .await
            })
        })
        .collect();
    until("the claims and finishes to wait in one line", || {
        let now = grouped.stats();
        now.claims.waiting == 6 && now.finishes.waiting == 6
    })
    .await;
    blocker.execute_batch("COMMIT").unwrap();

    let mut fences = Vec::new();
    for task in std::iter::once(first).chain(claims) {
        match task.await.unwrap().unwrap() {
            ClaimOutcome::Claimed(c) => fences.push(c.fence),
            other => panic!("a fresh key is claimed: {other:?}"),
        }
    }
    for outcome in batch.await.unwrap().unwrap() {
        match outcome.unwrap() {
            ClaimOutcome::Claimed(c) => fences.push(c.fence),
            other => panic!("a fresh key is claimed: {other:?}"),
        }
    }
    fences.sort_unstable();
    fences.dedup();
    assert_eq!(fences.len(), 7, "every claim under a fence of its own");
    assert!(
        fences[0] > highest,
        "new fences are above every earlier one"
    );
    for (i, task) in finishes.into_iter().enumerate() {
        let result = task.await.unwrap();
        let state = store.get(&held[i].key).await.unwrap().unwrap().record.state;
        if i == 2 {
            assert!(
                matches!(result, Err(StoreError::Fenced { .. })),
                "the stale fence is refused alone: {result:?}"
            );
            assert_eq!(state, RecordState::InProgress);
        } else {
            result.unwrap();
            assert_eq!(state, RecordState::Completed, "finish {i}");
        }
    }
    let after = grouped.stats();
    assert_eq!(
        after.calls - before.calls,
        2,
        "one lone call, then one call for the claims and finishes that waited"
    );
    assert_eq!(
        (
            after.claims.calls - before.claims.calls,
            after.finishes.calls - before.finishes.calls
        ),
        (2, 1)
    );
    assert_eq!(after.finishes.items - before.finishes.items, 6);

    // The next claim after the batch draws above the batch's fences: the
    // batch wrote its last fence back to the sequence.
    match claim(200).await.unwrap().unwrap() {
        ClaimOutcome::Claimed(c) => assert!(c.fence > *fences.last().unwrap()),
        other => panic!("a fresh key is claimed: {other:?}"),
    }
}

/// A store opened on first use: nothing exists until a call needs it (or
/// `ready`), a malformed URL is refused at once, and a store that cannot
/// be opened is that call's error, tried again by the next.
#[tokio::test]
async fn a_deferred_store_opens_on_first_use() {
    use idem_store::Deferred;

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idem.db");
    let url = format!("sqlite:{}", path.display());
    let deferred = Deferred::new(&url, StoreOptions::default()).unwrap();
    assert!(deferred.batches_share_commits());
    assert!(deferred.clock().now_ms() > 0);
    assert!(!path.exists() && !deferred.is_open(), "nothing opened yet");
    deferred.ready().await.unwrap();
    assert!(path.is_file() && deferred.is_open());
    let claim = deferred
        .claim(request(&conformance::key(1), 1, 60_000, 600_000, 1))
        .await
        .unwrap();
    assert!(matches!(claim, ClaimOutcome::Claimed(_)));

    assert!(matches!(
        Deferred::new("sqlit:/x.db", StoreOptions::default()),
        Err(StoreError::UnsupportedUrl { .. })
    ));
    let missing = dir.path().join("no/such/dir/idem.db");
    let deferred = Deferred::new(
        &format!("sqlite:{}", missing.display()),
        StoreOptions::default(),
    )
    .unwrap();
    for _ in 0..2 {
        assert!(matches!(
            deferred.ready().await,
            Err(StoreError::Open { .. })
        ));
    }
    assert!(!deferred.is_open());
}

/// Opening without migrating (`StoreOptions::migrate` off) refuses a
/// store that does not exist, and creates nothing.
#[tokio::test]
async fn opening_without_migrating_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idem.db");
    let read_only = StoreOptions {
        migrate: false,
        ..StoreOptions::default()
    };
    let url = format!("sqlite:{}", path.display());
    match idem_store::open(&url, read_only.clone()).await {
        Err(e @ StoreError::NotMigrated { found: None, .. }) => {
            assert!(e.to_string().contains("does not exist"), "{e}")
        }
        other => panic!(
            "expected NotMigrated, got {:?}",
            other.map(|s| s.describe())
        ),
    }
    assert!(!path.exists());
    // An empty file is there, but holds no store: said so, and left empty.
    std::fs::write(&path, b"").unwrap();
    match idem_store::open(&url, read_only.clone()).await {
        Err(e @ StoreError::NotMigrated { found: Some(0), .. }) => {
            assert!(e.to_string().contains("holds no idem schema yet"), "{e}")
        }
        other => panic!(
            "expected NotMigrated, got {:?}",
            other.map(|s| s.describe())
        ),
    }
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 0);
    std::fs::remove_file(&path).unwrap();
    idem_store::open(&url, StoreOptions::default())
        .await
        .unwrap();
    idem_store::open(&url, read_only).await.unwrap();
}

/// Makes a fresh store, for tests that try several kinds.
type MakeFixture = Box<dyn Fn() -> conformance::BoxFuture<conformance::Fixture>>;

/// Many concurrent callers through a group commit (two calls of a kind in
/// flight), on SQLite and PostgreSQL: every key is claimed exactly once,
/// every holder's completion under its own fence succeeds, and a write
/// under a stale fence is refused alone, whatever batch it shared.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn group_commit_under_contention_claims_each_key_once() {
    let mut factories: Vec<(&str, MakeFixture)> = vec![(
        "sqlite",
        Box::new(|| {
            Box::pin(conformance::grouped(sqlite_factory(
                SqliteOptions::default(),
            ))(StoreOptions::default()))
        }),
    )];
    if let Some(url) =
        conformance::postgres_test_url("group_commit_under_contention_claims_each_key_once")
    {
        factories.push((
            "postgres",
            Box::new(move || {
                Box::pin(conformance::grouped(conformance::postgres_factory(
                    url.clone(),
                ))(StoreOptions::default()))
            }),
        ));
    }
    for (name, factory) in factories {
        let fixture = factory().await;
        let store = fixture.store.clone();
        let keys = 16u32;
        let mut tasks = tokio::task::JoinSet::new();
        for caller in 0..96u32 {
            let store = store.clone();
            tasks.spawn(async move {
                let k = conformance::key(caller % keys);
                let r = request(&k, caller % keys, 600_000, 600_000, caller);
                match store.claim(r).await.unwrap() {
                    ClaimOutcome::Claimed(claim) => {
                        // Every third holder first tries a stale fence.
                        if caller % 3 == 0 {
                            let stale = store
                                .complete(&claim.key, claim.fence - 1, Outcome::new(1, "stale"))
                                .await;
                            assert!(matches!(stale, Err(StoreError::Fenced { .. })), "{stale:?}");
                        }
                        store
                            .complete(&claim.key, claim.fence, Outcome::new(0, "ok"))
                            .await
                            .unwrap();
                        Some(caller % keys)
                    }
                    ClaimOutcome::Existing(_) => None,
                }
            });
        }
        let mut claimed = Vec::new();
        while let Some(joined) = tasks.join_next().await {
            if let Some(k) = joined.unwrap() {
                claimed.push(k);
            }
        }
        claimed.sort_unstable();
        assert_eq!(
            claimed,
            (0..keys).collect::<Vec<_>>(),
            "{name}: every key claimed exactly once"
        );
        for k in 0..keys {
            let view = store.get(&conformance::key(k)).await.unwrap().unwrap();
            assert_eq!(view.record.state, RecordState::Completed, "{name}");
            assert_eq!(view.record.outcome.unwrap().status, 0, "{name}");
        }
    }
}
