//! `idem resolve`: a person settles one record waiting for review — the
//! effect happened (`--completed`), it may run again (`--release`), or
//! later duplicates are refused (`--reject`) — fenced like any write and
//! logged with who and why; or, with `--amend`, a person's release or
//! rejection that was wrong is settled again, both decisions kept in the
//! log.

use std::path::PathBuf;

use clap::{ArgGroup, Args};
use idem::forensics::ShownOperation;
use idem_store::{Holder, Outcome, RecordState, Resolution, ResolveRequest, StoreError};
use serde_json::json;

use crate::exit::{Failure, INCOMPLETE, SUCCESS};
use crate::record_key;
use crate::report::OPERATION_CHARS;
use crate::shown::say;
use crate::store_args::{StoreArgs, runtime};

/// `idem resolve`'s flags.
#[derive(Args, Debug)]
#[command(group(ArgGroup::new("resolution").required(true).args(["completed", "release", "reject"])))]
pub struct ResolveArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// The record: its 64 hex characters or a prefix naming one record,
    /// optionally as NAMESPACE/KEY (as `idem review` prints it).
    #[arg(value_name = "KEY")]
    pub key: String,
    /// Only look in this namespace.
    #[arg(long)]
    pub namespace: Option<String>,
    /// The effect did happen: record it as completed (replayed to every
    /// later duplicate).
    #[arg(long)]
    pub completed: bool,
    /// The effect did not happen: let the next claim re-execute it under a
    /// higher fence (where the policy re-executes a retryable failure).
    #[arg(long)]
    pub release: bool,
    /// Refuse it for good: later duplicates get the policy's answer to a
    /// permanent failure.
    #[arg(long)]
    pub reject: bool,
    /// The stored status (--completed: default 0; --reject: default 1).
    #[arg(long)]
    pub status: Option<i32>,
    /// The stored body for --completed (e.g. the provider's receipt).
    #[arg(long, value_name = "FILE", requires = "completed")]
    pub body_file: Option<PathBuf>,
    /// Why: what was checked, who asked (at most 1024 bytes). Kept in the
    /// attempt log.
    #[arg(long)]
    pub reason: String,
    /// Who decides (default: $USER).
    #[arg(long, value_name = "NAME")]
    pub by: Option<String>,
    /// The fence `idem review` showed: refused if the record moved on since.
    #[arg(long)]
    pub fence: Option<u64>,
    /// Amend a person's earlier release or rejection that was wrong (the
    /// record no longer waits for review): settle it again as --completed,
    /// --release or --reject says, under a new fence. Refused if a claim
    /// or another amendment moved it on since --fence, for a completed
    /// record (never overwritten) and for a holder's own end. The attempt
    /// log keeps both decisions; later duplicates get the amended one.
    /// Needs --fence (the fence of the resolution it amends): amending
    /// whatever is current would overwrite a colleague's amendment unseen.
    #[arg(long, requires = "fence")]
    pub amend: bool,
    /// JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Runs `idem resolve`.
pub fn run(args: ResolveArgs) -> Result<u8, Failure> {
    let by = match args.by.clone().or_else(|| std::env::var("USER").ok()) {
        Some(by) if !by.trim().is_empty() => by,
        _ => {
            return Err(Failure::input(
                "say who decides with --by NAME ($USER is not set)",
            ));
        }
    };
    let resolution = if args.completed {
        let body = match &args.body_file {
            Some(path) => std::fs::read(path)
                .map_err(|e| Failure::input(format!("cannot read {}: {e}", path.display())))?,
            None => Vec::new(),
        };
        Resolution::Completed(Outcome::new(args.status.unwrap_or(0), body))
    } else if args.release {
        Resolution::Release
    } else {
        Resolution::Reject {
            status: args.status.unwrap_or(1),
        }
    };
    runtime()?.block_on(async {
        let store = args.store.open_existing().await?;
        let shown = args.store.shown();
        let view = record_key::find(&store, &args.key, args.namespace.as_deref(), &shown).await?;
        let key = view.record.key.clone();
        let mut holder = Holder::this_process();
        holder.trigger = Some("manual".into());
        let request = ResolveRequest {
            key: key.clone(),
            observed_fence: args.fence.unwrap_or(view.record.fence),
            resolution,
            by: by.clone(),
            reason: args.reason.clone(),
            holder,
        };
        let records = store.records();
        let resolved = if args.amend {
            records.amend(request).await
        } else {
            records.resolve(request).await
        }
        .map_err(|e| refused(&key.to_string(), args.amend, e))?;
        let r = &resolved.record;
        let operation = ShownOperation::of_record(r);
        if args.json {
            println!(
                "{:#}",
                json!({
                    "key": key.to_string(), "state": r.state.as_str(), "fence": r.fence,
                    "by": by, "reason": args.reason, "operation": operation,
                    "amended": args.amend,
                })
            );
        } else {
            say!(
                "{key}: {}{} (fence {}), by {by}: {}",
                if args.amend { "amended: " } else { "" },
                describe(r.state),
                r.fence,
                args.reason
            );
            say!("  operation: {}", operation.line(OPERATION_CHARS));
        }
        Ok(SUCCESS)
    })
}

fn describe(state: RecordState) -> &'static str {
    match state {
        RecordState::Completed => "recorded as completed; later duplicates replay it",
        RecordState::FailedRetryable => "released; the next claim may execute it again",
        _ => "rejected; later duplicates get the policy's answer to a permanent failure",
    }
}

/// A refused resolution, as the person should read it: nothing changed.
fn refused(key: &str, amend: bool, e: StoreError) -> Failure {
    let message = match &e {
        StoreError::NotEligible { state, why, .. } if amend => format!(
            "{key} is {} and its resolution cannot be amended ({why}); nothing changed",
            state.as_str()
        ),
        StoreError::NotEligible { state, why, .. } => format!(
            "{key} is {} and not waiting for review ({why}); nothing changed",
            state.as_str()
        ),
        StoreError::Fenced { fence, current, .. } if fence > current => format!(
            "{key} has no fence {fence} yet (it is at fence {current}): check the --fence `idem review` printed; nothing changed"
        ),
        StoreError::Fenced { fence, current, .. } => format!(
            "{key} moved on since fence {fence} (it is at fence {current} now): look again with `{}`; nothing changed",
            if amend {
                "idem report --key"
            } else {
                "idem review"
            }
        ),
        StoreError::InvalidRequest(why) => return Failure::input(why),
        other => return Failure::input(format!("cannot resolve {key}: {other}")),
    };
    Failure {
        code: INCOMPLETE,
        message,
    }
}
