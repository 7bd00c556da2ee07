//! An effect in the store's own transaction: `Engine::run_once_in_sqlite`
//! and `Engine::run_once_in_postgres`.
//!
//! ```text
//! cargo run -p idem-host --example effect_in_store -- POLICY.wasm [STORE_URL [OPERATIONS]]
//! ```
//!
//! POLICY is the `provider-charge` (or `billing-charge`) component (`cargo
//! xtask build` writes it to `target/policies/`; without the argument, the
//! path in `IDEM_EXAMPLE_POLICY`). STORE_URL is a `sqlite:` or
//! `postgres://` store (a SQLite file in a temporary directory by default,
//! where the operations run twice: executed, then replayed). OPERATIONS
//! (default 3) charges invoices `inv-1` … `inv-N` of one customer.
//!
//! Each charge is a row of the `ledger` table, which lives beside idem's
//! tables (in the SQLite file; in the PostgreSQL store's schema): the row
//! and the record's completion commit in one transaction, so a crash
//! between the two cannot leave a charge without its record, or a record
//! without its charge. The table has no unique key on purpose: a charge
//! made twice would show as two rows. `IDEM_EXAMPLE_PAUSE_MS` pauses inside
//! the transaction after the row is written (the crash tests kill the
//! process there).

use std::path::PathBuf;
use std::time::Duration;

use idem::core::{Operation, OperationLimits};
use idem::engine::{Begin, Engine, EngineOptions, ExecContext, RunResult};
use idem::policy::{PolicyRuntime, RuntimeConfig};
use idem::store::{Database, EffectError, Outcome, StoreOptions, rusqlite, tokio_postgres};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args_os().skip(1);
    let policy = args
        .next()
        .or_else(|| std::env::var_os("IDEM_EXAMPLE_POLICY"))
        .map(PathBuf::from)
        .ok_or("usage: effect_in_store POLICY.wasm [STORE_URL [OPERATIONS]]")?;
    let temp = tempfile::tempdir()?;
    let (url, rounds) = match args.next() {
        Some(url) => (url.to_string_lossy().into_owned(), 1),
        None => (
            format!("sqlite:{}", temp.path().join("idem.db").display()),
            2,
        ),
    };
    let operations: u32 = match args.next() {
        Some(n) => n.to_string_lossy().parse()?,
        None => 3,
    };
    let pause = std::env::var("IDEM_EXAMPLE_PAUSE_MS")
        .ok()
        .map(|ms| ms.parse().map(Duration::from_millis))
        .transpose()?;

    let policy = PolicyRuntime::new(RuntimeConfig::default())?.load_file(&policy)?;
    let store = idem::store::open(&url, StoreOptions::default()).await?;
    // The store's own database: SQLite or PostgreSQL (the in-memory store
    // refuses an effect in its transaction: nothing there is atomic with
    // a business write).
    let database = store.database().await?;
    let engine = Engine::new(policy, store, EngineOptions::default());

    for _ in 0..rounds {
        for n in 1..=operations {
            let invoice = format!("inv-{n}");
            let op = charge(&invoice)?;
            let result = match &database {
                Database::Sqlite(_) => {
                    let invoice = invoice.clone();
                    engine
                        .run_once_in_sqlite(&op, move |tx, ctx| {
                            ledger_sqlite(tx, ctx, &invoice, pause)
                        })
                        .await?
                }
                Database::Postgres(postgres) => {
                    let table = format!("{}.ledger", postgres.schema());
                    engine
                        .run_once_in_postgres(&op, None, async |tx, ctx| {
                            ledger_postgres(tx, ctx, &table, &invoice, pause).await
                        })
                        .await?
                }
                _ => return Err("a database this example does not know".into()),
            };
            match result {
                RunResult::Executed { fence, result, .. } => match result {
                    Ok(_) => println!("{invoice}: executed at fence {fence}"),
                    Err(failed) => println!("{invoice}: failed at fence {fence}: {failed:?}"),
                },
                RunResult::NotRun(Begin::Replay(replay)) => println!(
                    "{invoice}: replayed {}",
                    String::from_utf8_lossy(&replay.outcome.body)
                ),
                RunResult::NotRun(other) => println!("{invoice}: not run: {other:?}"),
            }
        }
    }
    engine.flush_log().await;
    Ok(())
}

/// The charge of one invoice, as the policy reads it.
fn charge(invoice: &str) -> Result<Operation, idem::core::OpError> {
    Operation::from_json(
        &format!(
            r#"{{"kind":"charge","tenant":"acme","fields":{{"customer":"c1","billing_period":"2026-11","invoice_id":"{invoice}","amount":"100","currency":"EUR"}}}}"#
        ),
        &OperationLimits::default(),
    )
}

/// The charge as a ledger row in the SQLite file's transaction (the
/// store's `BEGIN IMMEDIATE` one: synchronous, on the store's connection).
fn ledger_sqlite(
    tx: &rusqlite::Transaction<'_>,
    ctx: &ExecContext,
    invoice: &str,
    pause: Option<Duration>,
) -> Result<Outcome, EffectError<rusqlite::Error>> {
    tx.execute(
        "CREATE TABLE IF NOT EXISTS ledger (invoice TEXT NOT NULL, amount TEXT NOT NULL, fence INTEGER NOT NULL)",
        [],
    )?;
    tx.execute(
        "INSERT INTO ledger (invoice, amount, fence) VALUES (?1, '100', ?2)",
        rusqlite::params![invoice, ctx.fence as i64],
    )?;
    if let Some(pause) = pause {
        std::thread::sleep(pause);
    }
    Ok(Outcome::new(0, format!("ledger row of {invoice}")))
}

/// The charge as a ledger row in a PostgreSQL transaction on the store's
/// pool (run again whole after a serialization failure).
async fn ledger_postgres(
    tx: &tokio_postgres::Transaction<'_>,
    ctx: &ExecContext,
    table: &str,
    invoice: &str,
    pause: Option<Duration>,
) -> Result<Outcome, EffectError<tokio_postgres::Error>> {
    tx.batch_execute(&format!(
        "CREATE TABLE IF NOT EXISTS {table} (invoice TEXT NOT NULL, amount TEXT NOT NULL, fence BIGINT NOT NULL)"
    ))
    .await?;
    tx.execute(
        &format!("INSERT INTO {table} (invoice, amount, fence) VALUES ($1, '100', $2)"),
        &[&invoice, &(ctx.fence as i64)],
    )
    .await?;
    if let Some(pause) = pause {
        tokio::time::sleep(pause).await;
    }
    Ok(Outcome::new(0, format!("ledger row of {invoice}")))
}
