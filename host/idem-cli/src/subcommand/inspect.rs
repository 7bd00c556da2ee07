//! `idem inspect`: what the store holds.

use clap::Args;
use idem::forensics::ShownOperation;
use idem_core::RecordState;
use idem_store::{ListFilter, RecordView};
use serde_json::json;

use crate::exit::{Failure, INCOMPLETE, SUCCESS};
use crate::record_key;
use crate::shown::{say, tell};
use crate::store_args::{StoreArgs, runtime};

/// How much of an operation a table row shows (`inspect KEY` shows it all).
const TABLE_OPERATION_CHARS: usize = 60;

/// `idem inspect`'s flags.
#[derive(Args, Debug)]
pub struct InspectArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// One record's key: all 64 hex characters, or a prefix of them (the
    /// table shows 16) that names one record; without it, a table of
    /// records.
    #[arg(value_name = "KEY")]
    pub key: Option<String>,
    /// Only this namespace.
    #[arg(long)]
    pub namespace: Option<String>,
    /// Only records in this state (in-progress, completed, failed-retryable,
    /// failed-permanent, outcome-unknown).
    #[arg(long)]
    pub state: Option<RecordState>,
    /// Only records whose operation has this field with this value, as
    /// the policy reads it: `--field invoice_id=R-189` (a number in its
    /// canonical spelling, a boolean as true or false). Repeat it for
    /// several fields, all of which must match.
    #[arg(long, value_name = "NAME=VALUE", value_parser = field_filter)]
    pub field: Vec<(String, String)>,
    /// At most this many records.
    #[arg(long, default_value_t = 100)]
    pub limit: u32,
    /// JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// `NAME=VALUE`, split at the first `=` (`inspect`, `review` and `report`
/// read `--field` with it).
pub(crate) fn field_filter(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((name, value)) if !name.is_empty() => Ok((name.to_string(), value.to_string())),
        // What a person typed, shown back escaped.
        _ => Err(format!(
            "`{}` is not NAME=VALUE (say invoice_id=R-189)",
            idem_core::text::escaped(text)
        )),
    }
}

fn record_json(v: &RecordView) -> serde_json::Value {
    let r = &v.record;
    json!({
        "key": r.key.digest.to_hex(),
        "namespace": r.key.namespace,
        "state": r.state.as_str(),
        "fence": r.fence,
        "attempts": r.attempts,
        "partition": r.partition,
        "policy": r.policy_digest,
        "fingerprint": r.fingerprint.to_hex(),
        "created_ms": r.created_ms,
        "updated_ms": r.updated_ms,
        "lease_until_ms": r.lease_until_ms,
        "lease_remaining_ms": v.lease_remaining_ms,
        "retain_until_ms": r.retain_until_ms,
        "age_ms": v.age_ms,
        "holder": {
            "run_id": r.holder.run_id, "trigger": r.holder.trigger, "attempt": r.holder.attempt,
            "host": r.holder.host, "pid": r.holder.pid, "who": r.holder.who(),
        },
        "operation": ShownOperation::of_record(r),
        "outcome": r.outcome.as_ref().map(|o| json!({
            "status": o.status,
            "size": o.body.len(),
            "body": String::from_utf8_lossy(&o.body),
            "error": o.error,
        })),
    })
}

/// Runs `idem inspect`.
pub fn run(args: InspectArgs) -> Result<u8, Failure> {
    // KEY, or NAMESPACE/KEY as reports print it (the same rule as
    // `report --key` and `resolve`).
    let (key_namespace, wanted) = match args.key.as_deref().map(record_key::parse).transpose()? {
        Some((namespace, prefix)) => (namespace, Some(prefix)),
        None => (None, None),
    };
    runtime()?.block_on(async {
        let store = args.store.open_existing().await?;
        // One more than asked for, to tell a listing cut at --limit from
        // one that holds everything.
        let filter = ListFilter {
            namespace: key_namespace.or_else(|| args.namespace.clone()),
            state: args.state,
            fields: args.field.clone(),
            limit: if wanted.is_some() {
                None
            } else {
                Some(args.limit.saturating_add(1))
            },
            ..ListFilter::default()
        };
        let mut views = store
            .records().list(filter)
            .await
            .map_err(|e| Failure::input(format!("cannot read {}: {e}", args.store.shown())))?;
        let cut = wanted.is_none() && views.len() > args.limit as usize;
        if cut {
            views.truncate(args.limit as usize);
        }
        if let Some(prefix) = &wanted {
            views.retain(|v| v.record.key.digest.to_hex().starts_with(prefix.as_str()));
            match views.len() {
                0 => {
                    return Err(Failure {
                        code: INCOMPLETE,
                        message: format!("no record with key {prefix} in {}", args.store.shown()),
                    });
                }
                1 => {}
                n => {
                    let keys: Vec<String> =
                        views.iter().map(|v| v.record.key.digest.to_hex()).collect();
                    return Err(Failure::input(format!(
                        "{n} records have keys starting with {prefix}; give more of the key: {}",
                        keys.join(", ")
                    )));
                }
            }
        }
        let cut_note = || {
            format!(
                "the listing stops at --limit {}: more records match (raise --limit, or narrow with --namespace or --state)",
                args.limit
            )
        };
        if args.json || wanted.is_some() {
            let records: Vec<_> = views.iter().map(record_json).collect();
            let out = if wanted.is_some() && records.len() == 1 {
                records[0].clone()
            } else {
                json!(records)
            };
            println!("{}", serde_json::to_string_pretty(&out).unwrap_or_default());
            if cut {
                // On stderr: the JSON on stdout stays one array of records.
                tell!("idem: {}", cut_note());
            }
            return Ok(SUCCESS);
        }
        say!(
            "{:<16}  {:<10} {:<16} {:>6} {:>4} {:>9} {:>8} {:<22} {:>6}  OPERATION",
            "KEY", "NAMESPACE", "STATE", "FENCE", "ATT", "AGE", "LEASE", "HOLDER", "STATUS"
        );
        for v in &views {
            let r = &v.record;
            let holder = format!(
                "{}/{}",
                r.holder.run_id.as_deref().unwrap_or("-"),
                r.holder.trigger.as_deref().unwrap_or("-")
            );
            say!(
                "{:<16}  {:<10} {:<16} {:>6} {:>4} {:>9} {:>8} {:<22} {:>6}  {}",
                &r.key.digest.to_hex()[..16],
                r.key.namespace,
                r.state.as_str(),
                r.fence,
                r.attempts,
                human_ms(v.age_ms),
                if v.lease_remaining_ms > 0 {
                    human_ms(v.lease_remaining_ms)
                } else {
                    "-".into()
                },
                holder,
                r.outcome
                    .as_ref()
                    .map(|o| o.status.to_string())
                    .unwrap_or_else(|| "-".into()),
                ShownOperation::of_record(r).line(TABLE_OPERATION_CHARS),
            );
        }
        if cut {
            say!("{} records shown; {}", views.len(), cut_note());
        } else {
            say!("{} records", views.len());
        }
        Ok(SUCCESS)
    })
}

fn human_ms(ms: u64) -> String {
    match ms {
        0..1_000 => format!("{ms}ms"),
        1_000..60_000 => format!("{}s", ms / 1_000),
        60_000..3_600_000 => format!("{}m", ms / 60_000),
        3_600_000..86_400_000 => format!("{}h", ms / 3_600_000),
        _ => format!("{}d", ms / 86_400_000),
    }
}
