//! An effect in the store's own transaction (`Store::database`): a store
//! either hands out its database, and then the effect's writes commit with
//! the holder's completion or not at all, or refuses
//! (`StoreError::NotTransactional`, the in-memory store) before anything is
//! written.
//!
//! The business table lives beside idem's (in the SQLite file, in the
//! PostgreSQL store's schema); what it holds is
//! read back through an effect of its own (a probe operation's outcome),
//! so that the check needs nothing but the store.

use std::future::Future;

use super::Fixture;
use super::assert::{claimed, fixture, holder, key, ms, request, view};
use idem_store::{
    Database, EffectError, Outcome, RecordKey, RecordState, StoreError, StoreOptions, TxEnd,
};

/// What the effect of one scenario does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Act {
    /// Inserts its business row, returns an outcome.
    Insert,
    /// Inserts its business row, then says it failed (retryable).
    InsertThenFail,
    /// Inserts its business row, then runs a statement that fails.
    InsertThenBadStatement,
    /// Creates the table (a probe: its answer is the count of `invoice`'s
    /// rows, in its outcome's body).
    Count,
}

/// The effect's table, created on first use (DDL is transactional on
/// both databases): beside idem's, in the SQLite file or in the PostgreSQL
/// store's own schema (one per fixture, dropped with it).
fn table(database: &Database) -> String {
    match database {
        #[cfg(feature = "postgres")]
        Database::Postgres(postgres) => format!("{}.ledger", postgres.schema()),
        _ => "ledger".to_string(),
    }
}

/// Runs `act` for `invoice` in `database`'s transaction, completing the
/// attempt holding `fence` on `key`.
async fn effect(
    database: &Database,
    key: &RecordKey,
    fence: u64,
    table: &str,
    invoice: &str,
    act: Act,
) -> Result<TxEnd, StoreError> {
    let create = format!(
        "CREATE TABLE IF NOT EXISTS {table} (invoice TEXT NOT NULL, fence BIGINT NOT NULL)"
    );
    match database {
        #[cfg(feature = "sqlite")]
        Database::Sqlite(sqlite) => {
            let (table, invoice) = (table.to_string(), invoice.to_string());
            sqlite
                .complete_in_transaction(key, fence, move |tx| {
                    tx.execute(&create, [])?;
                    if act == Act::Count {
                        let n: i64 = tx.query_row(
                            &format!("SELECT count(*) FROM {table} WHERE invoice = ?1"),
                            [&invoice],
                            |row| row.get(0),
                        )?;
                        return Ok(Outcome::new(0, n.to_string()));
                    }
                    tx.execute(
                        &format!("INSERT INTO {table} (invoice, fence) VALUES (?1, ?2)"),
                        idem_store::rusqlite::params![invoice, fence as i64],
                    )?;
                    match act {
                        Act::InsertThenFail => {
                            Err(EffectError::retryable(Outcome::error(2, "declined")))
                        }
                        Act::InsertThenBadStatement => {
                            tx.execute("INSERT INTO no_such_table VALUES (1)", [])?;
                            Ok(Outcome::new(0, "unreachable"))
                        }
                        _ => Ok(Outcome::new(0, format!("paid {invoice}"))),
                    }
                })
                .await
        }
        #[cfg(feature = "postgres")]
        Database::Postgres(postgres) => {
            postgres
                .complete_in_transaction(key, fence, None, &(), async |tx, _: &()| {
                    tx.batch_execute(&create).await?;
                    if act == Act::Count {
                        let row = tx
                            .query_one(
                                &format!("SELECT count(*) FROM {table} WHERE invoice = $1"),
                                &[&invoice],
                            )
                            .await?;
                        return Ok(Outcome::new(0, row.get::<_, i64>(0).to_string()));
                    }
                    tx.execute(
                        &format!("INSERT INTO {table} (invoice, fence) VALUES ($1, $2)"),
                        &[&invoice, &(fence as i64)],
                    )
                    .await?;
                    match act {
                        Act::InsertThenFail => {
                            Err(EffectError::retryable(Outcome::error(2, "declined")))
                        }
                        Act::InsertThenBadStatement => {
                            tx.batch_execute("INSERT INTO no_such_table VALUES (1)")
                                .await?;
                            Ok(Outcome::new(0, "unreachable"))
                        }
                        _ => Ok(Outcome::new(0, format!("paid {invoice}"))),
                    }
                })
                .await
        }
        #[allow(unreachable_patterns)] // A backend this build left out.
        _ => panic!("a database of a backend this build does not have"),
    }
}

/// How many business rows `invoice` has: a probe operation (key `n`)
/// whose effect counts them and commits the count as its outcome.
async fn rows(fx: &Fixture, database: &Database, table: &str, n: u32, invoice: &str) -> u64 {
    let k = key(n);
    let claim = claimed(&fx.store, request(&k, n, 60_000, 600_000, 9)).await;
    match effect(database, &k, claim.fence, table, invoice, Act::Count).await {
        Ok(TxEnd::Committed(outcome)) => String::from_utf8(outcome.body)
            .expect("a count")
            .parse()
            .expect("a count"),
        other => panic!("{}: the probe got {other:?}", fx.store.describe()),
    }
}

/// An effect's writes commit with its completion; a deposed holder's, a
/// failed effect's and a final record's roll back, and nothing else
/// changes; a store with no database refuses before anything is written.
pub async fn effects_in_the_store_transaction<F, Fut>(factory: &F)
where
    F: Fn(StoreOptions) -> Fut,
    Fut: Future<Output = Fixture>,
{
    let (fx, clock) = fixture(factory, idem_store::DEFAULT_MAX_OUTCOME_BYTES).await;
    let store = &fx.store;
    let database = match store.database().await {
        Ok(database) => database,
        Err(StoreError::NotTransactional { .. }) => {
            // Refused before anything was written: no record appeared.
            assert!(
                store
                    .records()
                    .list(Default::default())
                    .await
                    .expect("list")
                    .is_empty(),
                "{}: a refusal wrote something",
                store.describe()
            );
            return;
        }
        Err(other) => panic!("{}: database() failed: {other}", store.describe()),
    };
    let table = table(&database);

    // Committed together: the business row and the completion.
    let paid = key(1);
    let claim = claimed(store, request(&paid, 1, 5_000, 600_000, 1)).await;
    let end = effect(&database, &paid, claim.fence, &table, "inv-1", Act::Insert).await;
    assert_eq!(
        end.expect("committed"),
        TxEnd::Committed(Outcome::new(0, "paid inv-1")),
        "{}",
        store.describe()
    );
    let record = view(store, &paid).await.record;
    assert_eq!(
        (record.state, record.fence),
        (RecordState::Completed, claim.fence)
    );
    assert_eq!(rows(&fx, &database, &table, 100, "inv-1").await, 1);

    // A completed record is never overwritten: the second effect's row
    // rolls back with its refused completion.
    let again = effect(&database, &paid, claim.fence, &table, "inv-1", Act::Insert).await;
    assert!(
        matches!(again, Err(StoreError::NotInProgress { .. })),
        "{}: {again:?}",
        store.describe()
    );
    assert_eq!(rows(&fx, &database, &table, 101, "inv-1").await, 1);

    // A deposed holder (paused past its lease; another took over) commits
    // nothing of its writes and is fenced; its refused write is logged.
    let deposed = key(2);
    let old = claimed(store, request(&deposed, 2, 5_000, 600_000, 1)).await;
    clock.advance(ms(6_000));
    let new = store
        .records()
        .take_over(&deposed, old.fence, ms(5_000), holder(2), None)
        .await
        .expect("take-over");
    let late = effect(&database, &deposed, old.fence, &table, "inv-2", Act::Insert).await;
    match late {
        Err(StoreError::Fenced { fence, current, .. }) => {
            assert_eq!((fence, current), (old.fence, new.fence))
        }
        other => panic!("{}: expected Fenced, got {other:?}", store.describe()),
    }
    assert_eq!(rows(&fx, &database, &table, 102, "inv-2").await, 0);
    let record = view(store, &deposed).await.record;
    assert_eq!(
        (record.state, record.fence),
        (RecordState::InProgress, new.fence)
    );
    // The new holder's effect commits.
    let end = effect(&database, &deposed, new.fence, &table, "inv-2", Act::Insert).await;
    assert!(matches!(end, Ok(TxEnd::Committed(_))), "{end:?}");
    assert_eq!(rows(&fx, &database, &table, 103, "inv-2").await, 1);

    // The effect's failure rolls its writes back and records nothing: the
    // holder records it under its fence.
    for (n, act) in [(3, Act::InsertThenFail), (4, Act::InsertThenBadStatement)] {
        let k = key(n);
        let invoice = format!("inv-{n}");
        let claim = claimed(store, request(&k, n, 5_000, 600_000, 1)).await;
        let end = effect(&database, &k, claim.fence, &table, &invoice, act).await;
        match end {
            Ok(TxEnd::Failed {
                retryable: true,
                outcome,
            }) => {
                assert!(outcome.error.is_some(), "{act:?}: {outcome:?}")
            }
            other => panic!("{}: {act:?} got {other:?}", store.describe()),
        }
        assert_eq!(rows(&fx, &database, &table, 104 + n, &invoice).await, 0);
        let record = view(store, &k).await.record;
        assert_eq!(
            (record.state, record.fence),
            (RecordState::InProgress, claim.fence),
            "{act:?}: nothing recorded"
        );
        store
            .writes()
            .fail(&k, claim.fence, true, Outcome::error(2, "declined"))
            .await
            .expect("the failure, recorded under the fence");
    }
}
