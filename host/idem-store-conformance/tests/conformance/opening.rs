//! Opening a SQLite store: what is refused untouched (a directory, a
//! foreign or newer file, a read-only one, a missing directory), what a new
//! file becomes, URL options, opening without migrating.

use super::*;

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
        .expect_err("an error");
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
            other.map(|s| s.describe().to_string())
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
            other.map(|s| s.describe().to_string())
        ),
    }
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 0);
    std::fs::remove_file(&path).unwrap();
    idem_store::open(&url, StoreOptions::default())
        .await
        .unwrap();
    idem_store::open(&url, read_only).await.unwrap();
}
