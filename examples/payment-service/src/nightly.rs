//! The nightly billing job: every invoice in a file of operations charged
//! at the provider through the library's job runner, once per key however
//! often the job runs, on the same store as the service.

use std::num::NonZeroUsize;
use std::path::PathBuf;

use idem::core::{Operation, OperationLimits};
use idem::engine::{Engine, EngineOptions, ExecContext, Failed};
use idem::job::{EffectOutcome, JobOptions, JobRunner};
use idem::store::{Outcome, StoreOptions};
use serde_json::{Value, json};

use crate::StoreArgs;
use crate::client::{Charged, ProviderClient};

/// Flags of `payment-service nightly`.
#[derive(Debug, clap::Args)]
pub struct NightlyArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// The billing policy (one charge per customer, period and invoice).
    #[arg(long, default_value = "target/policies/billing-charge.wasm")]
    policy: PathBuf,
    /// The operations, one JSON object a line (see
    /// examples/nightly-billing/ops.jsonl).
    #[arg(long)]
    ops: PathBuf,
    /// The payment provider's base URL.
    #[arg(long)]
    provider: String,
    /// The run's identifier, recorded with every claim.
    #[arg(long, default_value = "nightly")]
    run_id: String,
    /// Why the run happened: scheduled, retry or manual.
    #[arg(long, default_value = "scheduled")]
    trigger: String,
    /// How many charges run at once.
    #[arg(long, default_value = "4")]
    concurrency: NonZeroUsize,
}

/// Runs the job and prints its summary as JSON.
pub async fn run(args: NightlyArgs) -> Result<(), String> {
    let operations = read_operations(&args)?;
    let policy = crate::load_policy(&args.policy)?;
    let store = idem::store::open(&args.store.store, StoreOptions::default())
        .await
        .map_err(|e| format!("cannot open the store {}: {e}", args.store.store))?;
    let engine = Engine::new(policy, store, EngineOptions::default());
    let options = JobOptions {
        concurrency: args.concurrency,
        ..JobOptions::default()
    };
    let provider = ProviderClient::new(&args.provider);
    let summary = JobRunner::new(engine, options)
        .run(operations, move |op: Operation, ctx: ExecContext| {
            let provider = provider.clone();
            async move { charge(&provider, &op, &ctx).await }
        })
        .await
        .map_err(|e| format!("the nightly job stopped: {e}"))?;
    let summary = serde_json::to_string(&summary).map_err(|e| e.to_string())?;
    println!("{summary}");
    Ok(())
}

/// One invoice's charge, under the claim's key and fence.
async fn charge(provider: &ProviderClient, op: &Operation, ctx: &ExecContext) -> EffectOutcome {
    let field = |name: &str| op.field(name).map(|v| v.as_material().to_string());
    let request = json!({
        "customer": field("customer"),
        "invoice_id": field("invoice_id"),
        "amount": field("amount"),
        "currency": field("currency"),
    });
    match provider.charge(&ctx.key, ctx.fence, &request).await {
        Charged::Receipt(receipt) => {
            EffectOutcome::Completed(Outcome::new(0, receipt.to_string().into_bytes()))
        }
        // Deposed: this attempt charged nothing, and its successor holds
        // the key.
        Charged::Stale(answer) => EffectOutcome::Failed(Failed {
            retryable: false,
            outcome: Outcome::error(409, answer.to_string()),
        }),
        // Another holder's charge is still being made: this attempt charged
        // nothing; a later run gets that charge replayed.
        Charged::Busy(answer) => EffectOutcome::Failed(Failed {
            retryable: true,
            outcome: Outcome::error(503, answer.to_string()),
        }),
        Charged::Refused(status, answer) => EffectOutcome::Failed(Failed {
            retryable: false,
            outcome: Outcome::error(i32::from(status), answer.to_string()),
        }),
        Charged::Unreachable(reason) => EffectOutcome::Unknown { reason },
    }
}

/// Reads every line of `--ops` as an operation carried by this run.
fn read_operations(args: &NightlyArgs) -> Result<Vec<Operation>, String> {
    let path = args.ops.display();
    let text =
        std::fs::read_to_string(&args.ops).map_err(|e| format!("cannot read {path}: {e}"))?;
    let run = json!({"run_id": args.run_id, "trigger": args.trigger, "attempt": 1});
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(n, line)| {
            let mut value: Value = serde_json::from_str(line)
                .map_err(|e| format!("{path}:{}: not JSON: {e}", n + 1))?;
            let object = value
                .as_object_mut()
                .ok_or_else(|| format!("{path}:{}: an operation must be a JSON object", n + 1))?;
            object.insert("run".into(), run.clone());
            Operation::from_value(value, &OperationLimits::default())
                .map_err(|e| format!("{path}:{}: {e}", n + 1))
        })
        .collect()
}
