//! SQLite's lookup index, written behind the claims: a lookup gives the
//! scan's answers whether the index is empty, part way or caught up; gc
//! takes its records out of it and lowers its mark (so that a record
//! claimed next, which may take a removed record's rowid, is not taken for
//! one indexed); an older file gains it empty; the idle indexer fills it
//! with no lookup asking.

use super::*;
use idem_store::{ClaimRequest, KeptOperation, ListFilter, RecordKey};

/// The claim of invoice `n` under `key(n)`, kept `retention_ms`.
fn invoice(n: u32, retention_ms: u64) -> ClaimRequest {
    let op = format!(
        r#"{{"kind":"charge","tenant":"acme","fields":{{"amount":{},"invoice_id":"R-{n}"}}}}"#,
        n % 7
    );
    ClaimRequest {
        operation: Some(KeptOperation::Kept(op)),
        ..request(&conformance::key(n), 1, 60_000, retention_ms, 1)
    }
}

/// Claims invoices `from..=to`, 500 per store call.
async fn claim_invoices(store: &SqliteStore, from: u32, to: u32, retention_ms: u64) {
    let all: Vec<u32> = (from..=to).collect();
    for chunk in all.chunks(500) {
        let requests = chunk.iter().map(|&n| invoice(n, retention_ms)).collect();
        for outcome in store.claim_many(requests).await.expect("claim") {
            assert!(
                matches!(outcome, Ok(ClaimOutcome::Claimed(_))),
                "{outcome:?}"
            );
        }
    }
}

/// The numbers of the invoices a lookup of `name` = `value` finds, sorted.
async fn found(store: &SqliteStore, name: &str, value: &str) -> Vec<u32> {
    let filter = ListFilter {
        fields: vec![(name.into(), value.into())],
        ..ListFilter::default()
    };
    let views = store.list(filter).await.expect("list");
    let mut numbers: Vec<u32> = views
        .iter()
        .map(|v| number(&v.record.key).expect("a key of this check"))
        .collect();
    numbers.sort_unstable();
    numbers
}

/// The invoice number of `key` (`key(n)`), from a table made once.
fn number(key: &RecordKey) -> Option<u32> {
    static NUMBERS: std::sync::LazyLock<std::collections::HashMap<RecordKey, u32>> =
        std::sync::LazyLock::new(|| (0..=4_000).map(|n| (conformance::key(n), n)).collect());
    NUMBERS.get(key).copied()
}

/// The index as a connection beside the store reads it: its mark, its
/// rows, the largest rowid of `records`, and rows naming no record.
fn index_state(path: &Path) -> (i64, i64, i64, i64) {
    let conn = rusqlite::Connection::open(path).expect("open beside the store");
    conn.query_row(
        "SELECT (SELECT indexed FROM record_fields_mark), (SELECT count(*) FROM record_fields), \
         (SELECT coalesce(max(rowid), 0) FROM records), \
         (SELECT count(*) FROM record_fields WHERE rec NOT IN (SELECT rowid FROM records))",
        [],
        |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?)),
    )
    .expect("read the index")
}

/// The invoices `n` of `1..=to` whose amount (`n % 7`) is `amount`.
fn with_amount(to: u32, amount: u32) -> Vec<u32> {
    (1..=to).filter(|n| n % 7 == amount).collect()
}

/// The same answers with the index empty (another connection holds the
/// write lock, so nothing can be indexed: everything is scanned), part
/// way (a lookup indexed its share and scanned the rest), and caught up
/// (after gc).
#[tokio::test]
async fn a_lookup_is_the_same_whether_the_index_is_empty_part_way_or_caught_up() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("idem.db");
    let store = open(&path).expect("create");
    let total = 3_000;
    claim_invoices(&store, 1, total, 86_400_000).await;
    let check = async |when: &str| {
        for n in [1, 2, 1_024, 1_025, 2_999, 3_000] {
            assert_eq!(
                found(&store, "invoice_id", &format!("R-{n}")).await,
                [n],
                "R-{n} ({when})"
            );
        }
        assert_eq!(
            found(&store, "invoice_id", "R-3001").await,
            [] as [u32; 0],
            "none ({when})"
        );
        assert_eq!(
            found(&store, "amount", "3").await,
            with_amount(total, 3),
            "a number, many records ({when})"
        );
        assert_eq!(
            found(&store, "amount", "\"3\"").await,
            [] as [u32; 0],
            "not as quoted text ({when})"
        );
    };

    let locker = rusqlite::Connection::open(&path).expect("open beside the store");
    locker
        .execute_batch("BEGIN IMMEDIATE")
        .expect("take the write lock");
    check("nothing indexed").await;
    assert_eq!(index_state(&path).0, 0, "nothing could be indexed");
    locker
        .execute_batch("COMMIT")
        .expect("release the write lock");

    check("part way").await;
    let (mark, _, last, stray) = index_state(&path);
    assert!(mark >= 1_024, "a lookup indexes its share first: {mark}");
    assert_eq!(last, i64::from(total));
    assert_eq!(stray, 0);

    assert_eq!(store.gc().await.expect("gc"), 0);
    let (mark, rows, last, _) = index_state(&path);
    assert_eq!((mark, rows), (last, 2 * i64::from(total)), "gc catches up");
    check("caught up").await;
}

/// gc removes its records' rows from the index, and lowers the mark when
/// it removed the newest records: the next record claimed takes the
/// rowid after the largest left, which the index has not seen, and is
/// found.
#[tokio::test]
async fn gc_takes_its_records_out_of_the_index_and_lowers_the_mark() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("idem.db");
    let clock = ManualClock::new(conformance::START_MS);
    let store = open_at(&path, &clock, true);
    claim_invoices(&store, 1, 2, 86_400_000).await;
    claim_invoices(&store, 3, 3, 1_000).await;
    assert_eq!(found(&store, "invoice_id", "R-3").await, [3]);
    assert_eq!(index_state(&path), (3, 6, 3, 0), "all three indexed");

    // Record 3 expires while it is in progress (its lease, a minute, then
    // a second of retention).
    clock.advance(Duration::from_secs(120));
    assert_eq!(store.gc().await.expect("gc"), 1);
    assert_eq!(
        index_state(&path),
        (2, 4, 2, 0),
        "its rows and its rowid gone"
    );

    // Record 4 takes rowid 3: after the lowered mark, so it is found.
    claim_invoices(&store, 4, 4, 86_400_000).await;
    assert_eq!(index_state(&path).2, 3, "the removed record's rowid again");
    assert_eq!(found(&store, "invoice_id", "R-4").await, [4]);
    assert_eq!(found(&store, "invoice_id", "R-3").await, [] as [u32; 0]);
    assert_eq!(found(&store, "amount", "4").await, [4]);
    assert_eq!(index_state(&path), (3, 6, 3, 0));
}

/// A version-9 file (before the index) gains it empty and at once (no
/// record is read by the migration); its records are found, scanned and
/// then through the index.
#[tokio::test]
async fn a_version_9_file_gains_an_empty_index_and_its_records_are_found() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("idem.db");
    let store = open(&path).expect("create");
    claim_invoices(&store, 1, 3, 86_400_000).await;
    drop(store);
    {
        let conn = rusqlite::Connection::open(&path).expect("open");
        conn.execute_batch(
            "DROP TABLE record_fields; DROP TABLE record_fields_mark; PRAGMA user_version = 9;",
        )
        .expect("downgrade");
    }
    let store = open(&path).expect("reopen");
    assert_eq!(
        store.schema_version().await.expect("version"),
        idem_store::SCHEMA_VERSION
    );
    assert_eq!(index_state(&path), (0, 0, 3, 0), "migrated empty");
    assert_eq!(found(&store, "invoice_id", "R-2").await, [2]);
    assert_eq!(index_state(&path), (3, 6, 3, 0), "filled by the lookup");
}

/// With no lookup and no gc, the idle indexer fills the index once the
/// store has had no call for a while.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_idle_indexer_fills_the_index_alone() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("idem.db");
    let store = open(&path).expect("create");
    claim_invoices(&store, 1, 600, 86_400_000).await;
    // Waits for it, within a bound far above what it takes (a second of
    // idleness, then three batches).
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while index_state(&path).0 < 600 {
        assert!(
            std::time::Instant::now() < deadline,
            "the idle indexer never caught up: {:?}",
            index_state(&path)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(index_state(&path), (600, 1_200, 600, 0));
    assert_eq!(found(&store, "invoice_id", "R-599").await, [599]);
}
