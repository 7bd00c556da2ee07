//! The fault harness itself: a throwaway PostgreSQL cluster that crashes,
//! restarts and loses its connections for real, and a small disk that
//! really fills. The fault tests of the stores build on these.

use idem_tests::pg_cluster::PgCluster;
use idem_tests::tmpfs::{SmallDisk, is_disk_full};

/// Runs `f` on a runtime of its own: the harness's calls block, so each
/// test keeps its client on a runtime it owns.
fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

async fn connect(url: &str) -> Result<tokio_postgres::Client, tokio_postgres::Error> {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls).await?;
    tokio::spawn(conn);
    Ok(client)
}

#[test]
fn cluster_starts_on_a_port_of_its_own_and_accepts_connections() {
    let Some(pg) = PgCluster::start("cluster_starts_on_a_port_of_its_own_and_accepts_connections")
    else {
        return;
    };
    assert_ne!(pg.port(), 5432, "never the shared server's port");
    block_on(async {
        let client = connect(&pg.url())
            .await
            .expect("the cluster accepts a connection");
        let row = client
            .query_one("SELECT current_user::text, 1 + 1", &[])
            .await
            .unwrap();
        assert_eq!(row.get::<_, String>(0), "postgres");
        assert_eq!(row.get::<_, i32>(1), 2);
    });
}

#[test]
fn a_committed_row_survives_a_crash_and_restart() {
    let Some(pg) = PgCluster::start("a_committed_row_survives_a_crash_and_restart") else {
        return;
    };
    let url = pg.url();
    block_on(async {
        let client = connect(&url).await.unwrap();
        client
            .batch_execute("CREATE TABLE t (k text PRIMARY KEY); INSERT INTO t VALUES ('one')")
            .await
            .unwrap();
        pg.restart_immediate();
        assert!(
            client.simple_query("SELECT 1").await.is_err(),
            "a connection does not survive the crash"
        );
        let client = connect(&url)
            .await
            .expect("the restarted cluster accepts connections");
        client
            .execute("INSERT INTO t VALUES ('two')", &[])
            .await
            .unwrap();

        pg.crash();
        assert!(
            connect(&url).await.is_err(),
            "a crashed cluster refuses connections"
        );
        pg.start_again();
        let client = connect(&url).await.unwrap();
        let rows = client
            .query("SELECT k FROM t ORDER BY k", &[])
            .await
            .unwrap();
        let keys: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
        assert_eq!(keys, ["one", "two"], "committed rows survive both crashes");
    });
}

#[test]
fn terminate_backends_breaks_a_held_connection() {
    let Some(pg) = PgCluster::start("terminate_backends_breaks_a_held_connection") else {
        return;
    };
    block_on(async {
        let held = connect(&pg.url()).await.unwrap();
        held.simple_query("SELECT 1")
            .await
            .expect("the connection works at first");
        assert_eq!(
            pg.terminate_backends(),
            1,
            "the one held connection is terminated"
        );
        assert!(
            held.simple_query("SELECT 1").await.is_err(),
            "a terminated connection fails its next query"
        );
        // The server itself is fine: a new connection works, and nothing is
        // left to terminate.
        let fresh = connect(&pg.url()).await.unwrap();
        fresh.simple_query("SELECT 1").await.unwrap();
        drop(fresh);
        drop(held);
    });
}

#[test]
fn a_small_disk_fills_and_takes_writes_again_once_freed() {
    let Some(disk) = SmallDisk::mount(
        "a_small_disk_fills_and_takes_writes_again_once_freed",
        1 << 20,
    ) else {
        return;
    };
    let probe = disk.path().join("probe");
    std::fs::write(&probe, vec![1u8; 64 * 1024]).expect("an empty disk takes a write");

    let ballast = disk.fill();
    let err = std::fs::write(disk.path().join("more"), vec![1u8; 64 * 1024])
        .expect_err("a full disk refuses a write");
    assert!(is_disk_full(&err), "ENOSPC, not {err:?}");
    assert!(err.to_string().contains("No space left"), "{err}");

    disk.free(ballast);
    std::fs::write(disk.path().join("more"), vec![1u8; 64 * 1024])
        .expect("a freed disk takes writes again");
}

#[test]
fn a_sqlite_store_on_a_full_disk_fails_with_disk_full_and_recovers() {
    let Some(disk) = SmallDisk::mount(
        "a_sqlite_store_on_a_full_disk_fails_with_disk_full_and_recovers",
        1 << 20,
    ) else {
        return;
    };
    let db = rusqlite::Connection::open(disk.path().join("store.db")).unwrap();
    db.execute_batch("CREATE TABLE t (v BLOB)").unwrap();
    // A row bigger than any free page the file has: the file must grow.
    let big = vec![7u8; 256 * 1024];
    let insert = |db: &rusqlite::Connection| db.execute("INSERT INTO t VALUES (?1)", [&big]);

    let ballast = disk.fill();
    let err = insert(&db).expect_err("a full disk refuses the row");
    assert_eq!(
        err.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DiskFull),
        "{err}"
    );

    disk.free(ballast);
    insert(&db).expect("the same connection writes again once the disk has room");
    let n: i64 = db
        .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 1, "the refused row left nothing behind");
}
