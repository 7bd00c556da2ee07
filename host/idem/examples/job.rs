//! A whole batch job, in process: `idem::job::JobRunner` (what `idem run`
//! does from the command line).
//!
//! ```text
//! cargo run -p idem-host --example job -- POLICY.wasm [STORE_DIR]
//! ```
//!
//! POLICY is the `billing-charge` component (`cargo xtask build` writes it to
//! `target/policies/billing-charge.wasm`; without the argument, the path in
//! `IDEM_EXAMPLE_POLICY`). The SQLite store is `STORE_DIR/idem.db`, in a
//! temporary directory by default.

use std::num::NonZeroUsize;
use std::path::PathBuf;

use idem::core::{Operation, OperationLimits};
use idem::engine::{Engine, EngineOptions, ExecContext};
use idem::job::{EffectOutcome, JobOptions, JobRunner};
use idem::policy::{PolicyRuntime, RuntimeConfig};
use idem::store::{Outcome, StoreOptions};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args_os().skip(1);
    let policy = args
        .next()
        .or_else(|| std::env::var_os("IDEM_EXAMPLE_POLICY"))
        .map(PathBuf::from)
        .ok_or("usage: job POLICY.wasm [STORE_DIR] (or set IDEM_EXAMPLE_POLICY)")?;
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

    // The job: one November invoice for each of five customers.
    let operations = (1..=5)
        .map(|n| {
            let json = format!(
                r#"{{"kind":"charge","tenant":"acme","fields":{{"customer":"c{n}","billing_period":"2026-11","invoice_id":"inv-{n}","amount":"100","currency":"EUR"}},"run":{{"run_id":"nightly-2026-11-30","trigger":"scheduled"}}}}"#
            );
            Operation::from_json(&json, &OperationLimits::default())
        })
        .collect::<Result<Vec<_>, _>>()?;

    // Two effects at a time; claims and completions go to the store in
    // batches (JobOptions::claim_batch and finish_batch, 64 by default).
    let options = JobOptions {
        concurrency: NonZeroUsize::new(2).expect("2 is not zero"),
        ..JobOptions::default()
    };
    let runner = JobRunner::new(engine, options);

    // The nightly job runs twice: the second run replays every charge.
    // `charge` runs once per key a run claims; the runner heartbeats the
    // claim meanwhile and records what `charge` reports.
    for run in 1..=2 {
        println!("run #{run}:");
        let summary = runner.run(operations.clone(), charge).await?;
        println!(
            "  summary: {} executed, {} replayed, {} failed, all completed: {}",
            summary.executed,
            summary.replayed,
            summary.failed,
            summary.all_completed()
        );
    }
    Ok(())
}

/// The effect: one invoice's charge, under its claim. A real one hands
/// `ctx.key` (as the payment provider's idempotency key) and `ctx.fence`
/// downstream.
async fn charge(op: Operation, ctx: ExecContext) -> EffectOutcome {
    let customer = op.field("customer").map_or("?", |v| v.as_material());
    println!(
        "  effect: charging {customer} under key {} at fence {}",
        ctx.key, ctx.fence
    );
    // EffectOutcome::Failed, NotStarted or Unknown report the other ends.
    EffectOutcome::Completed(Outcome::new(0, format!("receipt of {customer}")))
}
