//! Exactly once with a closure: `Engine::run_once`.
//!
//! ```text
//! cargo run -p idem-host --example run_once -- POLICY.wasm [STORE_DIR]
//! ```
//!
//! POLICY is the `billing-charge` component (`cargo xtask build` writes it to
//! `target/policies/billing-charge.wasm`; without the argument, the path in
//! `IDEM_EXAMPLE_POLICY`). The SQLite store is `STORE_DIR/idem.db`, in a
//! temporary directory by default.

use std::path::PathBuf;

use idem::core::{Operation, OperationLimits};
use idem::engine::{Begin, Engine, EngineOptions, ExecContext, Failed, RunResult};
use idem::policy::{PolicyRuntime, RuntimeConfig};
use idem::store::{Outcome, StoreOptions};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args_os().skip(1);
    let policy = args
        .next()
        .or_else(|| std::env::var_os("IDEM_EXAMPLE_POLICY"))
        .map(PathBuf::from)
        .ok_or("usage: run_once POLICY.wasm [STORE_DIR] (or set IDEM_EXAMPLE_POLICY)")?;
    let (dir, _temp) = match args.next() {
        Some(dir) => (PathBuf::from(dir), None),
        None => {
            let temp = tempfile::tempdir()?;
            (temp.path().to_path_buf(), Some(temp))
        }
    };
    std::fs::create_dir_all(&dir)?;

    let policy = PolicyRuntime::new(RuntimeConfig::default())?.load_file(&policy)?;
    let url = format!("sqlite:{}", dir.join("idem.db").display());
    let store = idem::store::open(&url, StoreOptions::default()).await?;
    let engine = Engine::new(policy, store, EngineOptions::default());
    let op = Operation::from_json(
        r#"{"kind":"charge","tenant":"acme","fields":{"customer":"c1","billing_period":"2026-11","invoice_id":"inv-1","amount":"100","currency":"EUR"}}"#,
        &OperationLimits::default(),
    )?;

    let mut runs = 0;
    for call in 1..=2 {
        // run_once begins the operation; only if this caller holds the key
        // does it call the closure (heartbeating the claim while it runs),
        // then it records what the closure returned under the claim's fence.
        let result = engine
            .run_once(&op, |ctx| {
                runs += 1;
                charge(ctx)
            })
            .await?;
        match result {
            RunResult::Executed { fence, result, .. } => println!(
                "call #{call}: executed at fence {fence}, recorded as {}",
                if result.is_ok() {
                    "completed"
                } else {
                    "failed"
                }
            ),
            // The closure did not run: what `begin` answered instead.
            RunResult::NotRun(Begin::Replay(replay)) => println!(
                "call #{call}: replayed {}; the closure did not run",
                String::from_utf8_lossy(&replay.outcome.body)
            ),
            RunResult::NotRun(other) => println!("call #{call}: not run: {other:?}"),
        }
    }
    println!("the closure ran {runs} time(s) in 2 calls");
    engine.flush_log().await;
    Ok(())
}

/// The stand-in effect. A real one hands `ctx.key` (as the payment
/// provider's idempotency key) and `ctx.fence` downstream.
async fn charge(ctx: ExecContext) -> Result<Outcome, Failed> {
    println!(
        "  effect: charging c1 under key {} at fence {}",
        ctx.key, ctx.fence
    );
    // Err(Failed { retryable, outcome }) would record a failure instead.
    Ok(Outcome::new(
        0,
        format!("receipt of c1 (fence {})", ctx.fence),
    ))
}
