//! The completion as a SQL function in the store's schema (`complete`,
//! `completed_under`; migration 9), called from a service's own
//! transaction as a client in another language calls it: the record it
//! writes reads back through the store API exactly as one completed by
//! `complete_in` (the machine's finish: state, outcome, `updated`,
//! `retain_until`, nothing else) with the same attempt-log entry; a stale
//! fence raises IDF01 and the business row rolls back, and `log_refused`
//! logs the refused write afterwards as the library does; a completed record
//! is never overwritten; a key never claimed is gone; a body over the
//! store's limit is refused before the record is read; `completed_under`
//! waits for an open completing transaction and answers what committed.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use idem::engine::{Begin, Execution};
use idem::store::{
    AttemptEntry, AttemptEvent, AttemptFilter, DEFAULT_MAX_OUTCOME_BYTES, FENCED_SQLSTATE,
    INVALID_COMPLETION_SQLSTATE, ManualClock, Outcome, Record, RecordKey, RecordState, Store,
    StoreOptions, tokio_postgres,
};

use super::{OnPostgres, charge, on_clock};

/// `SELECT "schema".complete($1 … $5)` for `execution`, in `tx`.
async fn complete(
    tx: &tokio_postgres::Transaction<'_>,
    schema: &str,
    key: &RecordKey,
    fence: u64,
    outcome: &Outcome,
) -> Result<(), tokio_postgres::Error> {
    tx.execute(
        &format!("SELECT \"{schema}\".complete($1, $2, $3, $4, $5)"),
        &[
            &key.namespace,
            &key.digest.to_hex(),
            &(fence as i64),
            &outcome.status,
            &outcome.body,
        ],
    )
    .await
    .map(|_| ())
}

/// `completed_under` in a statement of its own.
async fn completed_under(
    client: &tokio_postgres::Client,
    schema: &str,
    execution: &Execution,
    outcome: &Outcome,
) -> bool {
    asked(client, schema, execution.key(), execution.fence(), outcome).await
}

/// `completed_under` of `key` under `fence`.
async fn asked(
    client: &tokio_postgres::Client,
    schema: &str,
    key: &RecordKey,
    fence: u64,
    outcome: &Outcome,
) -> bool {
    client
        .query_one(
            &format!("SELECT \"{schema}\".completed_under($1, $2, $3, $4, $5)"),
            &[
                &key.namespace,
                &key.digest.to_hex(),
                &(fence as i64),
                &outcome.status,
                &outcome.body,
            ],
        )
        .await
        .unwrap()
        .get(0)
}

/// The SQLSTATE and DETAIL of a refused call.
fn refusal(e: &tokio_postgres::Error) -> (String, String, String) {
    let db = e
        .as_db_error()
        .unwrap_or_else(|| panic!("not the server's: {e}"));
    (
        db.code().code().to_string(),
        db.detail().unwrap_or_default().to_string(),
        db.message().to_string(),
    )
}

async fn record(store: &Store, key: &RecordKey) -> Record {
    store.records().get(key).await.unwrap().unwrap().record
}

async fn log(store: &Store, key: &RecordKey) -> Vec<AttemptEntry> {
    let filter = AttemptFilter {
        key: Some(key.clone()),
        ..AttemptFilter::default()
    };
    store.records().attempts(filter).await.unwrap()
}

/// What `machine::finish` makes of `before` completed with `outcome` at
/// `now`, and the log entry of that end: the state, the outcome, `updated`
/// and `retain_until` change, nothing else (the holder and its token, the
/// lease, the kept operation stay).
fn finished(before: &Record, outcome: &Outcome, now: u64) -> (Record, AttemptEntry) {
    let mut record = before.clone();
    record.state = RecordState::Completed;
    record.outcome = Some(outcome.clone());
    record.updated_ms = now;
    record.retain_until_ms = now.saturating_add(before.retention_ms).min(i64::MAX as u64);
    // Nothing else: no operation digest, actor or detail.
    let mut entry = AttemptEntry::new(
        before.key.clone(),
        before.fence,
        AttemptEvent::Completed,
        now,
    );
    entry.holder = Some(before.holder.provenance());
    entry.policy_digest = Some(before.policy_digest.clone());
    (record, entry)
}

/// One completion through the SQL function and one through
/// `complete_in_postgres`, each beside a business row in the service's
/// transaction, on a store that reads the server's clock (as the function
/// does): both records are what the machine's finish makes of the record
/// as claimed, and both log entries are the end's, as the fast finish
/// writes them. A duplicate is then replayed the stored outcome.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sql_function_writes_what_complete_in_writes() {
    let Some(pg) = OnPostgres::open(
        "the_sql_function_writes_what_complete_in_writes",
        "billing-charge",
        StoreOptions::default(),
    )
    .await
    else {
        return;
    };
    let (store, engine, schema) = (&pg.store, &pg.engine, &pg.schema);
    let (mut service, ledger) = pg.with_ledger().await;
    // A body that is not UTF-8, and a status other than 0.
    let outcome = Outcome::new(7, b"\x00\xffreceipt".to_vec());

    let mut ends = Vec::new();
    for (invoice, by_function) in [("inv-sql", true), ("inv-rust", false)] {
        let op = charge(invoice);
        let Begin::Execute(execution) = engine.begin(&op).await.unwrap() else {
            panic!("the first begin executes");
        };
        let before = record(store, execution.key()).await;
        let tx = service.transaction().await.unwrap();
        tx.execute(
            &format!("INSERT INTO {ledger} VALUES ($1, $2)"),
            &[&invoice, &(execution.fence() as i64)],
        )
        .await
        .unwrap();
        if by_function {
            complete(&tx, schema, execution.key(), execution.fence(), &outcome)
                .await
                .unwrap();
        } else {
            execution
                .complete_in_postgres(&tx, outcome.clone())
                .await
                .unwrap();
        }
        tx.commit().await.unwrap();
        let after = record(store, execution.key()).await;
        assert!(after.updated_ms >= before.updated_ms, "{invoice}");
        let (expected, entry) = finished(&before, &outcome, after.updated_ms);
        assert_eq!(after, expected, "{invoice}: not the machine's finish");
        let entries = log(store, execution.key()).await;
        let mut last = entries.last().expect("an entry").clone();
        last.id = 0;
        assert_eq!(last, entry, "{invoice}");
        assert_eq!(
            entries.iter().map(|e| e.event).collect::<Vec<_>>(),
            [AttemptEvent::Executed, AttemptEvent::Completed],
            "{invoice}"
        );
        match engine.begin(&op).await.unwrap() {
            Begin::Replay(replay) => assert_eq!(replay.outcome, outcome, "{invoice}"),
            other => panic!("{invoice}: a completed record replays, got {other:?}"),
        }
        assert!(completed_under(&service, schema, &execution, &outcome).await);
        ends.push((before, after));
    }
    // The two ends differ only where their claims did.
    let [(sql_before, sql_after), (rust_before, rust_after)] = &ends[..] else {
        unreachable!()
    };
    let alike = |r: &Record, like: &Record| {
        let mut alike = r.clone();
        alike.key = like.key.clone();
        alike.fingerprint = like.fingerprint;
        alike.fence = like.fence;
        alike.created_ms = like.created_ms;
        alike.updated_ms = like.updated_ms;
        alike.lease_until_ms = like.lease_until_ms;
        alike.retain_until_ms = r.retain_until_ms - r.updated_ms + like.updated_ms;
        alike.holder = like.holder.clone();
        alike.operation = like.operation.clone();
        alike
    };
    assert_eq!(alike(sql_after, rust_after), *rust_after);
    assert_eq!(alike(sql_before, rust_before), *rust_before);
    let rows: i64 = service
        .query_one(&format!("SELECT count(*) FROM {ledger}"), &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(rows, 2);
}

/// A holder paused past its lease while another took over calls the
/// function with its stale fence: IDF01 (`fenced`, naming the record's
/// fence), and committing its transaction anyway rolls its business row
/// back. The new holder completes; a second completion under its fence is
/// refused (`final`) and changes nothing; a key never claimed is `gone`;
/// `completed_under` says which completion committed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_fence_raises_idf01_and_the_business_row_rolls_back() {
    // Ten minutes behind the server: after the take-over below, the records
    // are still live by the server's clock, which the function reads.
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    let clock = ManualClock::new(now.as_millis() as u64 - 10 * 60 * 1000);
    let Some(pg) = OnPostgres::open(
        "a_stale_fence_raises_idf01_and_the_business_row_rolls_back",
        "provider-charge",
        on_clock(&clock),
    )
    .await
    else {
        return;
    };
    let (store, engine, schema) = (&pg.store, &pg.engine, &pg.schema);
    let (mut service, ledger) = pg.with_ledger().await;
    let rows = async |service: &tokio_postgres::Client| -> i64 {
        service
            .query_one(&format!("SELECT count(*) FROM {ledger}"), &[])
            .await
            .unwrap()
            .get(0)
    };
    let op = charge("inv-1");
    let Begin::Execute(old) = engine.begin(&op).await.unwrap() else {
        panic!("the first begin executes");
    };
    clock.advance(Duration::from_secs(6 * 60));
    let Begin::Execute(new) = engine.begin(&op).await.unwrap() else {
        panic!("an expired claim is taken over");
    };
    let outcome = Outcome::new(0, "charged");

    let tx = service.transaction().await.unwrap();
    tx.execute(
        &format!("INSERT INTO {ledger} VALUES ('inv-1', $1)"),
        &[&(old.fence() as i64)],
    )
    .await
    .unwrap();
    let refused = complete(&tx, schema, old.key(), old.fence(), &outcome)
        .await
        .unwrap_err();
    let (code, detail, message) = refusal(&refused);
    assert_eq!(
        (code.as_str(), detail.as_str()),
        (FENCED_SQLSTATE, "fenced")
    );
    assert!(
        message.contains(&old.key().digest.to_hex())
            && message.contains(&format!("under fence {}", old.fence()))
            && message.contains(&format!("at fence {}", new.fence())),
        "{message}"
    );
    // Committed anyway, as a careless caller would: it rolls back.
    let _ = tx.commit().await;
    assert_eq!(
        rows(&service).await,
        0,
        "the deposed holder's row committed"
    );
    // The refused write, logged after the rollback as the library logs it,
    // once.
    let log_refused = format!("SELECT \"{schema}\".log_refused($1, $2, $3)");
    let params = |e: &Execution| {
        let key = e.key();
        (key.namespace.clone(), key.digest.to_hex(), e.fence() as i64)
    };
    let (namespace, key_hex, fence) = params(&old);
    for logged in [true, false] {
        let row = service
            .query_one(&log_refused, &[&namespace, &key_hex, &fence])
            .await
            .unwrap();
        assert_eq!(row.get::<_, bool>(0), logged);
    }
    let refused = log(store, old.key())
        .await
        .into_iter()
        .filter(|e| e.event == AttemptEvent::Fenced)
        .map(|mut e| {
            (e.id, e.at_ms) = (0, 0);
            e
        })
        .collect::<Vec<_>>();
    // Naming no holder, digest or actor: only the refusal.
    let mut expected = AttemptEntry::new(old.key().clone(), old.fence(), AttemptEvent::Fenced, 0);
    expected.detail = Some(format!(
        "finishing refused: the record is at fence {}",
        new.fence()
    ));
    assert_eq!(refused, [expected]);
    // The holder of the current fence was refused nothing: nothing to log.
    let (namespace, key_hex, fence) = params(&new);
    let row = service
        .query_one(&log_refused, &[&namespace, &key_hex, &fence])
        .await
        .unwrap();
    assert!(!row.get::<_, bool>(0));

    let tx = service.transaction().await.unwrap();
    tx.execute(
        &format!("INSERT INTO {ledger} VALUES ('inv-1', $1)"),
        &[&(new.fence() as i64)],
    )
    .await
    .unwrap();
    complete(&tx, schema, new.key(), new.fence(), &outcome)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(rows(&service).await, 1);
    let completed = record(store, new.key()).await;
    assert_eq!(
        (completed.state, completed.fence),
        (RecordState::Completed, new.fence())
    );

    // Never overwritten: the same holder again, with another outcome.
    let tx = service.transaction().await.unwrap();
    tx.execute(
        &format!("INSERT INTO {ledger} VALUES ('inv-1', $1)"),
        &[&(new.fence() as i64)],
    )
    .await
    .unwrap();
    let again = complete(
        &tx,
        schema,
        new.key(),
        new.fence(),
        &Outcome::new(0, "twice"),
    )
    .await
    .unwrap_err();
    assert_eq!(refusal(&again).0.as_str(), FENCED_SQLSTATE, "{again}");
    assert_eq!(refusal(&again).1, "final");
    let _ = tx.commit().await;
    assert_eq!(rows(&service).await, 1);
    assert_eq!(record(store, new.key()).await, completed);

    // A key nobody claimed.
    let never = RecordKey {
        namespace: new.key().namespace.clone(),
        digest: idem::store::Digest([7; 32]),
    };
    let tx = service.transaction().await.unwrap();
    let gone = complete(&tx, schema, &never, 1, &outcome)
        .await
        .unwrap_err();
    assert_eq!(refusal(&gone).1, "gone", "{gone}");
    drop(tx);

    assert!(completed_under(&service, schema, &new, &outcome).await);
    assert!(!completed_under(&service, schema, &old, &outcome).await);
    assert!(!completed_under(&service, schema, &new, &Outcome::new(0, "twice")).await);
    let completions = log(store, new.key())
        .await
        .into_iter()
        .filter(|e| e.event == AttemptEvent::Completed)
        .map(|e| e.fence)
        .collect::<Vec<_>>();
    assert_eq!(completions, [new.fence()]);
}

/// A body over the store's limit (`DEFAULT_MAX_OUTCOME_BYTES`, what `idem
/// serve` keeps) is refused with IDF02 before the record is read, and the
/// claim stays held; a body of exactly the limit completes it. A key that
/// is not 64 hexadecimal digits is refused the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_over_the_limit_is_refused_before_the_record_is_read() {
    let Some(pg) = OnPostgres::open(
        "a_body_over_the_limit_is_refused_before_the_record_is_read",
        "billing-charge",
        StoreOptions::default(),
    )
    .await
    else {
        return;
    };
    let (store, engine, schema) = (&pg.store, &pg.engine, &pg.schema);
    let mut service = pg.client().await;
    let Begin::Execute(execution) = engine.begin(&charge("inv-1")).await.unwrap() else {
        panic!("the first begin executes");
    };
    let too_large = Outcome::new(0, vec![b'x'; DEFAULT_MAX_OUTCOME_BYTES + 1]);
    let tx = service.transaction().await.unwrap();
    let refused = complete(&tx, schema, execution.key(), execution.fence(), &too_large)
        .await
        .unwrap_err();
    assert_eq!(
        refusal(&refused).0,
        INVALID_COMPLETION_SQLSTATE,
        "{refused}"
    );
    drop(tx);
    let tx = service.transaction().await.unwrap();
    let bad_key = tx
        .execute(
            &format!("SELECT \"{schema}\".complete($1, $2, $3)"),
            &[
                &execution.key().namespace,
                &"not-a-key",
                &(execution.fence() as i64),
            ],
        )
        .await
        .unwrap_err();
    assert_eq!(
        refusal(&bad_key).0,
        INVALID_COMPLETION_SQLSTATE,
        "{bad_key}"
    );
    drop(tx);
    assert_eq!(
        record(store, execution.key()).await.state,
        RecordState::InProgress
    );

    let largest = Outcome::new(0, vec![b'x'; DEFAULT_MAX_OUTCOME_BYTES]);
    let tx = service.transaction().await.unwrap();
    complete(&tx, schema, execution.key(), execution.fence(), &largest)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let completed = record(store, execution.key()).await;
    assert_eq!(completed.outcome, Some(largest));
}

/// `completed_under` asked while the completing transaction is still open
/// (a lost COMMIT answer, before the server has ended that transaction)
/// waits for the record's row lock, then answers for what the transaction
/// did: `false` after it rolled back, `true` after it committed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completed_under_waits_for_the_open_transaction_and_answers_what_it_did() {
    let Some(pg) = OnPostgres::open(
        "completed_under_waits_for_the_open_transaction",
        "billing-charge",
        StoreOptions::default(),
    )
    .await
    else {
        return;
    };
    let (engine, schema) = (&pg.engine, &pg.schema);
    let mut service = pg.client().await;
    let asker = Arc::new(pg.client().await);
    let Begin::Execute(execution) = engine.begin(&charge("inv-1")).await.unwrap() else {
        panic!("the first begin executes");
    };
    let outcome = Outcome::new(0, "charged");
    for commits in [false, true] {
        let tx = service.transaction().await.unwrap();
        complete(&tx, schema, execution.key(), execution.fence(), &outcome)
            .await
            .unwrap();
        let (client, name, key) = (asker.clone(), schema.clone(), execution.key().clone());
        let (fence, sent) = (execution.fence(), outcome.clone());
        let ask = tokio::spawn(async move { asked(&client, &name, &key, fence, &sent).await });
        // Until the question waits for this transaction's row lock.
        let mut waited = false;
        for _ in 0..1_000 {
            let waiting: i64 = tx
                .query_one(
                    "SELECT count(*) FROM pg_locks WHERE NOT granted \
                     AND locktype = 'transactionid' \
                     AND transactionid = pg_current_xact_id()::xid",
                    &[],
                )
                .await
                .unwrap()
                .get(0);
            if waiting > 0 {
                waited = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(waited, "the question did not wait for the transaction");
        if commits {
            tx.commit().await.unwrap();
        } else {
            tx.rollback().await.unwrap();
        }
        assert_eq!(ask.await.unwrap(), commits, "committed: {commits}");
    }
}
