//! Runs the conformance suite against the memory, SQLite and (with
//! `IDEM_TEST_POSTGRES_URL`) PostgreSQL stores, the SQL stores also behind
//! `GroupCommit`, plus SQLite-specific tests: opening bad files, schema
//! versions, and real concurrent connections racing on one file.

mod field_index;
mod group_commit;
mod migrations;
mod opening;
mod races;

use std::path::Path;
use std::sync::{Arc, Barrier};
use std::time::Duration;

use idem_store::{
    AttemptFilter, ClaimOutcome, ManualClock, OpenErrorKind, Outcome, Ownership, RecordState,
    Records, SqliteOptions, SqliteStore, Store, StoreError, StoreOptions, StoreUrl, Synchronous,
    Writes,
};
use idem_store_conformance::{self as conformance, memory_factory, request, sqlite_factory};

macro_rules! conformance {
    ($($check:ident),* $(,)?) => {
        mod memory {
            $(
                #[tokio::test]
                async fn $check() {
                    idem_store_conformance::$check(&idem_store_conformance::memory_factory()).await;
                }
            )*
        }
        mod sqlite {
            $(
                #[tokio::test]
                async fn $check() {
                    let factory = idem_store_conformance::sqlite_factory(Default::default());
                    idem_store_conformance::$check(&factory).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test]
                async fn $check() {
                    let Some(url) = idem_store_conformance::postgres_test_url(concat!("postgres::", stringify!($check))) else {
                        return;
                    };
                    let factory = idem_store_conformance::postgres_factory(url);
                    idem_store_conformance::$check(&factory).await;
                }
            )*
        }
        // The same checks through a group commit (concurrent claims and
        // finishes sharing store calls): no check may tell the difference.
        mod sqlite_grouped {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $check() {
                    let factory = idem_store_conformance::grouped(
                        idem_store_conformance::sqlite_factory(Default::default()),
                    );
                    idem_store_conformance::$check(&factory).await;
                }
            )*
        }
        mod postgres_grouped {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $check() {
                    let Some(url) = idem_store_conformance::postgres_test_url(concat!("postgres_grouped::", stringify!($check))) else {
                        return;
                    };
                    let factory = idem_store_conformance::grouped(
                        idem_store_conformance::postgres_factory(url),
                    );
                    idem_store_conformance::$check(&factory).await;
                }
            )*
        }
    };
}

// One test per check and store, from the one list of checks.
idem_store_conformance::for_each_conformance_check!(conformance);

/// The names in [`idem_store_conformance::for_each_conformance_check!`], as strings.
macro_rules! check_names {
    ($($check:ident),* $(,)?) => {
        [$(stringify!($check)),*]
    };
}

/// Every public check in `src/` (a `pub async fn` taking only a
/// factory) is in the list of checks, once, and the list names nothing else:
/// a check left out of the list would run nowhere.
#[test]
fn every_check_is_listed_once() {
    let listed = idem_store_conformance::for_each_conformance_check!(check_names);
    let mut unique: Vec<&str> = listed.to_vec();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(
        unique.len(),
        listed.len(),
        "a check listed twice: {listed:?}"
    );
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut defined = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("read src") {
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
        "the checks defined in src/ and those in for_each_conformance_check! differ"
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
