//! Exactly once by hand: `Engine::begin`, the effect, `Execution::complete`.
//!
//! ```text
//! cargo run -p idem-host --example begin_complete -- POLICY.wasm [STORE_DIR]
//! ```
//!
//! POLICY is the `billing-charge` component (`cargo xtask build` writes it to
//! `target/policies/billing-charge.wasm`; without the argument, the path in
//! `IDEM_EXAMPLE_POLICY`). The SQLite store is `STORE_DIR/idem.db`, in a
//! temporary directory by default: give a directory and run the example
//! twice, and the second run only replays.

use std::path::PathBuf;

use idem::core::{Operation, OperationLimits};
use idem::engine::{Begin, Engine, EngineError, EngineOptions};
use idem::policy::{PolicyRuntime, RuntimeConfig};
use idem::store::{Outcome, StoreOptions};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args_os().skip(1);
    let policy = args
        .next()
        .or_else(|| std::env::var_os("IDEM_EXAMPLE_POLICY"))
        .map(PathBuf::from)
        .ok_or("usage: begin_complete POLICY.wasm [STORE_DIR] (or set IDEM_EXAMPLE_POLICY)")?;
    // A temporary directory is removed when `_temp` drops, at the end.
    let (dir, _temp) = match args.next() {
        Some(dir) => (PathBuf::from(dir), None),
        None => {
            let temp = tempfile::tempdir()?;
            (temp.path().to_path_buf(), Some(temp))
        }
    };
    std::fs::create_dir_all(&dir)?;

    // The policy (a sandboxed WebAssembly component) derives the key; the
    // store keeps one record per key; the engine composes the two.
    let policy = PolicyRuntime::new(RuntimeConfig::default())?.load_file(&policy)?;
    let url = format!("sqlite:{}", dir.join("idem.db").display());
    let store = idem::store::open(&url, StoreOptions::default()).await?;
    println!(
        "policy {} {}, store {url}",
        policy.info().name,
        policy.info().version
    );
    let engine = Engine::new(policy, store, EngineOptions::default());

    // One charge of the nightly billing job: customer c1's November invoice.
    let op = Operation::from_json(
        r#"{"kind":"charge","tenant":"acme","fields":{"customer":"c1","billing_period":"2026-11","invoice_id":"inv-1","amount":"100","currency":"EUR"}}"#,
        &OperationLimits::default(),
    )?;

    // The job runs twice (a retry, a second worker, an operator's re-run):
    // the charge happens once, the second begin is a replay.
    for run in 1..=2 {
        print!("begin #{run}: ");
        charge_once(&engine, &op).await?;
    }
    // Answers to duplicates reach the attempt log in batches: flush them
    // before the process exits.
    engine.flush_log().await;
    Ok(())
}

/// Begins `op` and, if this caller now holds its key, performs the charge
/// and records it; otherwise says what the policy decided instead.
async fn charge_once(engine: &Engine, op: &Operation) -> Result<(), EngineError> {
    match engine.begin(op).await? {
        Begin::Execute(claim) => {
            // The stand-in effect. A real one hands the key (as the payment
            // provider's idempotency key) and the fence downstream.
            let (key, fence) = (claim.key_hex(), claim.fence());
            println!("executed: charging c1 100 EUR under key {key} at fence {fence}");
            // Recorded under the fence: a holder that was deposed in the
            // meantime gets EngineError::Fenced and changes nothing.
            claim.complete(Outcome::new(0, "receipt of c1")).await?;
            println!("  recorded as completed");
        }
        Begin::Replay(replay) => println!(
            "replayed: {} (recorded at fence {}); nothing charged again",
            String::from_utf8_lossy(&replay.outcome.body),
            replay.fence
        ),
        Begin::InProgress { reason, .. } => println!("in progress elsewhere: {reason}"),
        Begin::Conflict { status, reason, .. } => println!("conflict ({status}): {reason}"),
        Begin::Rejected { status, reason, .. } => println!("rejected ({status}): {reason}"),
        // `Begin` is non-exhaustive: a later idem may answer in a new way,
        // and nothing was claimed for this one.
        other => println!("not run: {other:?}"),
    }
    Ok(())
}
