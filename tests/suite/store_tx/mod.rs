//! Effects in the store's own transaction (`Engine::run_once_in_sqlite`,
//! `Engine::run_once_in_postgres`, `Execution::complete_in_postgres`),
//! against real SQLite files and a real PostgreSQL: here the refusal before
//! anything is claimed and an effect's failure recorded once;
//! `postgres.rs` a serialization failure run again and never recorded, a
//! lost COMMIT answer read back, a deposed holder's caller-owned
//! transaction committing nothing, a take-over waiting for the
//! transaction; `crash.rs` a holder killed (SIGKILL) between its business
//! write and its completion, many times, on both stores; `atomic.rs` an
//! expired claim re-executed instead of going to review, the late holder's
//! commit rolled back, and forensics naming the case; `sql_function.rs`
//! the completion as a SQL function in the store's schema, as a service in
//! another language calls it; `sql_command.rs` the guide's `psql` command
//! calling it under `idem exec`. [`OnPostgres`] is what the PostgreSQL
//! tests start from.

mod atomic;
mod crash;
mod postgres;
mod sql_command;
mod sql_function;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use idem::core::{Operation, OperationLimits};
use idem::engine::{Begin, Engine, EngineError, EngineOptions, ExecContext, RunResult};
use idem::store::{
    AttemptEvent, AttemptFilter, ManualClock, MemoryStore, Outcome, RecordState, Store, StoreError,
    StoreOptions, tokio_postgres,
};
use idem_store_conformance::{drop_postgres_schema, fresh_schema};
use idem_tests::{load, postgres_url};

/// The charge of `invoice` (policies `provider-charge`, `billing-charge`).
pub(super) fn charge(invoice: &str) -> Operation {
    Operation::from_json(
        &format!(
            r#"{{"kind":"charge","tenant":"acme","fields":{{"customer":"c1","billing_period":"2026-11","invoice_id":"{invoice}","amount":"100","currency":"EUR"}}}}"#
        ),
        &OperationLimits::default(),
    )
    .unwrap()
}

/// `url` with a schema of its own.
pub(super) fn schema_url(url: &str, schema: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}idem_schema={schema}&idem_pool_size=4")
}

/// A client of its own, as a service beside idem holds one.
pub(super) async fn connect(url: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    client
}

/// Store options on `clock` (the store's clock, moved by the test).
pub(super) fn on_clock(clock: &ManualClock) -> StoreOptions {
    StoreOptions {
        clock: clock.store_clock(),
        ..StoreOptions::default()
    }
}

/// A PostgreSQL store in a schema of its own in the test database, and an
/// engine on it: what each PostgreSQL test here starts from. The schema is
/// dropped with the fixture.
pub(super) struct OnPostgres {
    /// The test database (no schema named): a service's own connections.
    pub url: String,
    /// The store's schema, where the tests' business tables go too.
    pub schema: String,
    /// The store.
    pub store: Store,
    /// An engine with the test's policy over the store.
    pub engine: Engine,
    /// The store's URL (`url` with `schema`).
    store_url: String,
}

impl OnPostgres {
    /// The fixture for `test`, with `policy` and `options`; `None` when no
    /// PostgreSQL is configured and the test is skipped (see
    /// [`postgres_url`]).
    pub(super) async fn open(test: &str, policy: &str, options: StoreOptions) -> Option<Self> {
        let url = postgres_url(test)?;
        let schema = fresh_schema();
        let store_url = schema_url(&url, &schema);
        let store = idem::store::open(&store_url, options).await.unwrap();
        let engine = Engine::new(load(policy), store.clone(), EngineOptions::default());
        Some(OnPostgres {
            url,
            schema,
            store,
            engine,
            store_url,
        })
    }

    /// A client of the service's own on the database.
    pub(super) async fn client(&self) -> tokio_postgres::Client {
        connect(&self.url).await
    }

    /// A client of the service's own, and the business table it writes,
    /// `{schema}.ledger (invoice text, fence bigint)`, created through it:
    /// the client and the table's name.
    pub(super) async fn with_ledger(&self) -> (tokio_postgres::Client, String) {
        let client = self.client().await;
        let ledger = format!("{}.ledger", self.schema);
        client
            .batch_execute(&format!(
                "CREATE TABLE {ledger} (invoice text, fence bigint)"
            ))
            .await
            .unwrap();
        (client, ledger)
    }
}

impl Drop for OnPostgres {
    fn drop(&mut self) {
        drop_postgres_schema(&self.store_url);
    }
}

/// The events the attempt log holds for `op`'s key.
pub(super) async fn events(store: &Store, key: &idem::store::RecordKey) -> Vec<AttemptEvent> {
    let filter = AttemptFilter {
        key: Some(key.clone()),
        ..AttemptFilter::default()
    };
    let entries = store.records().attempts(filter).await.unwrap();
    entries.into_iter().map(|e| e.event).collect()
}

#[tokio::test]
async fn the_memory_store_refuses_an_effect_in_its_transaction_before_claiming() {
    let store: Store = MemoryStore::new(StoreOptions::default()).into();
    let engine = Engine::new(
        load("provider-charge"),
        store.clone(),
        EngineOptions::default(),
    );
    let ran = Arc::new(AtomicU32::new(0));
    let counted = ran.clone();
    let refused = engine
        .run_once_in_sqlite(&charge("inv-1"), move |_, _| {
            counted.fetch_add(1, Ordering::SeqCst);
            Ok(Outcome::new(0, "charged"))
        })
        .await;
    match refused {
        Err(EngineError::Store(StoreError::NotTransactional { why, .. })) => {
            assert!(why.contains("SQLite or PostgreSQL"), "{why}")
        }
        other => panic!("expected NotTransactional, got {other:?}"),
    }
    let refused = engine
        .run_once_in_postgres(&charge("inv-1"), None, async |_, _| {
            Ok(Outcome::new(0, "charged"))
        })
        .await;
    assert!(
        matches!(
            refused,
            Err(EngineError::Store(StoreError::NotTransactional { .. }))
        ),
        "{refused:?}"
    );
    assert_eq!(ran.load(Ordering::SeqCst), 0, "the effect ran");
    let records = store.records().list(Default::default()).await.unwrap();
    assert!(records.is_empty(), "a refusal claimed: {records:?}");
}

/// The effect's own failure rolls its row back and is recorded under the
/// fence: retryable, the next run re-executes it (`provider-charge`) and
/// its row is the only one; permanent, it is replayed and never run again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_effects_failure_rolls_its_writes_back_and_is_recorded_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idem.db");
    let store = idem::store::open(
        &format!("sqlite:{}", path.display()),
        StoreOptions::default(),
    )
    .await
    .unwrap();
    let engine = Engine::new(
        load("provider-charge"),
        store.clone(),
        EngineOptions::default(),
    );
    let effect = |fail: Option<bool>| {
        move |tx: &idem::store::rusqlite::Transaction<'_>, ctx: &ExecContext| {
            tx.execute(
                "CREATE TABLE IF NOT EXISTS ledger (fence INTEGER NOT NULL)",
                [],
            )?;
            tx.execute("INSERT INTO ledger VALUES (?1)", [ctx.fence as i64])?;
            match fail {
                Some(true) => Err(idem::store::EffectError::retryable(Outcome::error(
                    2, "declined",
                ))),
                Some(false) => Err(idem::store::EffectError::permanent(Outcome::error(
                    3,
                    "card blocked",
                ))),
                None => Ok(Outcome::new(0, "charged")),
            }
        }
    };
    let rows = || {
        let db = idem::store::rusqlite::Connection::open(&path).unwrap();
        db.query_row("SELECT count(*) FROM ledger", [], |row| {
            row.get::<_, i64>(0)
        })
        .unwrap()
    };

    let op = charge("inv-1");
    let first = engine
        .run_once_in_sqlite(&op, effect(Some(true)))
        .await
        .unwrap();
    let RunResult::Executed {
        key,
        result: Err(failed),
        ..
    } = first
    else {
        panic!("{first:?}");
    };
    assert!(failed.retryable);
    let record = store.records().get(&key).await.unwrap().unwrap().record;
    assert_eq!(record.state, RecordState::FailedRetryable);
    let second = engine.run_once_in_sqlite(&op, effect(None)).await.unwrap();
    let RunResult::Executed {
        fence,
        result: Ok(_),
        ..
    } = second
    else {
        panic!("a retryable failure is re-executed: {second:?}");
    };
    assert!(fence > record.fence);
    assert_eq!(rows(), 1, "only the successful run's row");
    assert_eq!(
        events(&store, &key).await,
        [
            AttemptEvent::Executed,
            AttemptEvent::FailedRetryable,
            AttemptEvent::TakenOver,
            AttemptEvent::Completed
        ]
    );

    let op = charge("inv-2");
    let first = engine
        .run_once_in_sqlite(&op, effect(Some(false)))
        .await
        .unwrap();
    assert!(
        matches!(&first, RunResult::Executed { result: Err(f), .. } if !f.retryable),
        "{first:?}"
    );
    let again = engine.run_once_in_sqlite(&op, effect(None)).await.unwrap();
    assert!(
        matches!(again, RunResult::NotRun(Begin::Replay(_))),
        "a permanent failure is replayed: {again:?}"
    );
    assert_eq!(rows(), 1, "the failed runs wrote nothing");
}
