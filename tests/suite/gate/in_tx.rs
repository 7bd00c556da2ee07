//! The gate in the downstream's own transaction: the admission, the
//! downstream's business write and the result commit together (SQLite:
//! `SqliteStore::gate_in_transaction`; PostgreSQL, in the caller's
//! transaction: `PostgresStore::gate_admit_in` / `gate_record_in`), so a
//! deposed holder's write rolls back and an effect that fails leaves the
//! key as it was.

use std::time::Duration;

use idem::store::{
    Admission, Database, GateRun, ManualClock, PostgresStore, StoreError, StoreOptions,
    tokio_postgres,
};
use idem_store_conformance::{drop_postgres_schema, fresh_schema};
use idem_tests::{TestStore, postgres_url};

use super::{request, ticket};

/// Runs fence `fence`'s charge behind the gate: one ledger row, in the
/// store's own file, with the result.
async fn charge_in_sqlite(
    store: &idem::store::SqliteStore,
    fence: u64,
    fail: bool,
) -> GateRun<String> {
    store
        .gate_in_transaction(request("k", fence), move |tx, ticket| {
            tx.execute(
                "INSERT INTO ledger (key, fence) VALUES (?1, ?2)",
                (ticket.key.as_str(), ticket.fence as i64),
            )
            .map_err(|e| e.to_string())?;
            if fail {
                return Err("the bank said no".to_string());
            }
            Ok(format!("receipt {fence}").into_bytes())
        })
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_sqlite_transaction_the_write_and_the_result_commit_together() {
    let place = TestStore::sqlite();
    let store = idem::store::open(&place.store, StoreOptions::default())
        .await
        .unwrap();
    let Ok(Database::Sqlite(sqlite)) = store.database().await else {
        panic!("a SQLite store has its database");
    };
    let db = place.dir.path().join("idem.db");
    let rows = || {
        let conn = rusqlite::Connection::open(&db).unwrap();
        conn.query_row("SELECT count(*) FROM ledger", [], |r| r.get::<_, i64>(0))
            .unwrap()
    };
    rusqlite::Connection::open(&db)
        .unwrap()
        .execute_batch("CREATE TABLE ledger (key TEXT NOT NULL, fence INTEGER NOT NULL)")
        .unwrap();

    // An effect that fails rolls its row back, and its admission with it.
    assert!(matches!(
        charge_in_sqlite(&sqlite, 1, true).await,
        GateRun::Failed(_)
    ));
    assert_eq!(rows(), 0);
    assert!(store.gates().entry("charges", "k").await.unwrap().is_none());

    // Fence 2 applies; fence 1, deposed, runs nothing; a repeat replays.
    assert!(
        matches!(charge_in_sqlite(&sqlite, 2, false).await, GateRun::Applied(r) if r == b"receipt 2")
    );
    match charge_in_sqlite(&sqlite, 1, false).await {
        GateRun::NotAdmitted(Admission::Stale { highest: 2 }) => {}
        other => panic!("{other:?}"),
    }
    match charge_in_sqlite(&sqlite, 2, false).await {
        GateRun::NotAdmitted(Admission::Replay { result, fence: 2 }) => {
            assert_eq!(result, b"receipt 2")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(rows(), 1, "the downstream applied once");
}

/// A client of its own on the database, as the downstream holds one.
async fn connect(url: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    client
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_the_callers_postgres_transaction_a_deposed_holders_write_rolls_back() {
    let Some(url) = postgres_url("gate_in_the_callers_postgres_transaction") else {
        return;
    };
    let schema = fresh_schema();
    let sep = if url.contains('?') { '&' } else { '?' };
    let store_url = format!("{url}{sep}idem_schema={schema}&idem_pool_size=2");
    let clock = ManualClock::new(1_000_000);
    let options = StoreOptions {
        clock: clock.store_clock(),
        ..StoreOptions::default()
    };
    let store = PostgresStore::connect(&store_url, options).await.unwrap();
    let gates: idem::store::Store = store.clone().into();
    let ledger = format!("{schema}.ledger");
    let mut a = connect(&url).await;
    let mut b = connect(&url).await;
    a.batch_execute(&format!(
        "CREATE TABLE {ledger} (key text NOT NULL, fence bigint NOT NULL)"
    ))
    .await
    .unwrap();
    let rows = async |client: &tokio_postgres::Client| -> i64 {
        client
            .query_one(&format!("SELECT count(*) FROM {ledger}"), &[])
            .await
            .unwrap()
            .get(0)
    };

    // Holder 1 was admitted outside a transaction and stopped; its window
    // ran out and holder 2 was admitted. Holder 1 comes back and writes its
    // row in its own transaction: the result is refused, and the refusal
    // aborts the transaction, so the row never commits.
    let one = ticket(gates.gates().admit(&request("k", 1)).await.unwrap());
    clock.advance(Duration::from_secs(31));
    let two = ticket(gates.gates().admit(&request("k", 2)).await.unwrap());
    let tx = a.transaction().await.unwrap();
    tx.execute(&format!("INSERT INTO {ledger} VALUES ('k', 1)"), &[])
        .await
        .unwrap();
    let refused = store.gate_record_in(&tx, &one, b"receipt 1".to_vec()).await;
    assert!(
        matches!(refused, Err(StoreError::GateRefused { .. })),
        "{refused:?}"
    );
    // The caller commits anyway: the transaction was aborted, so COMMIT
    // rolls back (whatever the server answers it).
    let _ = tx.commit().await;
    assert_eq!(rows(&b).await, 0, "the deposed holder's row rolled back");
    gates.gates().release(&two).await.unwrap();

    // In the callers' transactions: holder 3 admitted holds the entry's row
    // lock until it commits; holder 4 waits for it, then gets the replay.
    let tx = a.transaction().await.unwrap();
    let three = ticket(store.gate_admit_in(&tx, &request("k", 3)).await.unwrap());
    tx.execute(&format!("INSERT INTO {ledger} VALUES ('k', 3)"), &[])
        .await
        .unwrap();
    let waiting = {
        let (store, url) = (store.clone(), url.clone());
        tokio::spawn(async move {
            let mut c = connect(&url).await;
            let tx = c.transaction().await.unwrap();
            let answer = store.gate_admit_in(&tx, &request("k", 4)).await.unwrap();
            tx.commit().await.unwrap();
            answer
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !waiting.is_finished(),
        "holder 4 waits for holder 3's transaction"
    );
    store
        .gate_record_in(&tx, &three, b"receipt 3".to_vec())
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(
        waiting.await.unwrap(),
        Admission::Replay {
            result: b"receipt 3".to_vec(),
            fence: 3
        }
    );
    // Holder 3 (now lower than 4) is refused; a rolled-back admission
    // leaves nothing behind.
    let tx = b.transaction().await.unwrap();
    assert_eq!(
        store.gate_admit_in(&tx, &request("k", 3)).await.unwrap(),
        Admission::Stale { highest: 4 }
    );
    let fresh = store.gate_admit_in(&tx, &request("new", 1)).await.unwrap();
    assert!(matches!(fresh, Admission::Admitted { .. }));
    tx.execute(&format!("INSERT INTO {ledger} VALUES ('new', 1)"), &[])
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    assert!(
        gates
            .gates()
            .entry("charges", "new")
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(rows(&a).await, 1, "the downstream applied once");
    drop_postgres_schema(&store_url);
}
