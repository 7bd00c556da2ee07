//! `idem review`: the records waiting for a person (outcome unknown, or in
//! progress past their lease unless their effect is atomic with their
//! end), each with its timeline; `idem resolve` settles one.

use clap::Args;
use idem::forensics::{
    self,
    review::{re_executing_records_matching, waiting_for_review_matching},
};
use idem_core::RecordState;
use idem_store::ListFilter;
use serde_json::json;

use crate::exit::{Failure, SUCCESS};
use crate::shown::say;
use crate::store_args::{StoreArgs, runtime};
use crate::subcommand::inspect::field_filter;
use crate::subcommand::report::entry_json;
use crate::when;

/// How much of an operation a line shows.
pub const OPERATION_CHARS: usize = 160;

/// `idem review`'s flags.
#[derive(Args, Debug)]
pub struct ReviewArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// Only this namespace.
    #[arg(long)]
    pub namespace: Option<String>,
    /// Only the records in this state: outcome-unknown, or in-progress
    /// (past its lease); the states that wait for a person.
    #[arg(long)]
    pub state: Option<RecordState>,
    /// Only records whose operation has this field with this value, as
    /// `idem inspect --field` reads it: `--field invoice_id=R-189`.
    /// Repeat it for several fields, all of which must match.
    #[arg(long, value_name = "NAME=VALUE", value_parser = field_filter)]
    pub field: Vec<(String, String)>,
    /// At most this many records.
    #[arg(long, default_value_t = 100)]
    pub limit: usize,
    /// JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Runs `idem review`.
pub fn run(args: ReviewArgs) -> Result<u8, Failure> {
    if let Some(state) = args.state
        && !matches!(state, RecordState::OutcomeUnknown | RecordState::InProgress)
    {
        return Err(Failure::input(format!(
            "--state {}: no record in that state waits for review (outcome-unknown or \
             in-progress); `idem inspect --state {}` lists them",
            state.as_str(),
            state.as_str()
        )));
    }
    // The same filter `idem inspect` reads.
    let scope = ListFilter {
        namespace: args.namespace.clone(),
        state: args.state,
        fields: args.field.clone(),
        ..ListFilter::default()
    };
    runtime()?.block_on(async {
        let store = args.store.open_existing().await?;
        let (waiting, total) = waiting_for_review_matching(&store, &scope, args.limit)
            .await
            .map_err(|e| Failure::input(format!("cannot read {}: {e}", args.store.shown())))?;
        if args.json {
            let out: Vec<serde_json::Value> = waiting
                .iter()
                .map(|w| {
                    let r = &w.view.record;
                    json!({
                        "key": r.key.to_string(),
                        "state": r.state.as_str(),
                        "fence": r.fence,
                        "attempts": r.attempts,
                        "why": w.why,
                        "operation": w.operation,
                        "updated_ms": r.updated_ms,
                        "holder": {
                            "run_id": r.holder.run_id, "trigger": r.holder.trigger,
                            "host": r.holder.host, "pid": r.holder.pid,
                            "who": r.holder.who(),
                        },
                        "timeline": w.timeline.iter().zip(forensics::shown_events(&w.timeline)).map(|(e, shown)| entry_json(e, shown)).collect::<Vec<_>>(),
                    })
                })
                .collect();
            println!("{:#}", serde_json::Value::Array(out));
            return Ok(SUCCESS);
        }
        let re_executing = re_executing_records_matching(&store, &scope)
            .await
            .map_err(|e| Failure::input(format!("cannot read {}: {e}", args.store.shown())))?
            .len();
        let narrowed = args.state.is_some() || !args.field.is_empty();
        let that_match = |n: usize| match (narrowed, n) {
            (false, _) => "",
            (true, 1) => " that matches",
            (true, _) => " that match",
        };
        if waiting.is_empty() {
            say!("nothing{} waits for review in {}", that_match(1), args.store.shown());
            say_re_executing(re_executing);
            return Ok(SUCCESS);
        }
        say!(
            "{total} record{}{} wait{} for review in {}{}:",
            if total == 1 { "" } else { "s" },
            that_match(total),
            if total == 1 { "s" } else { "" },
            args.store.shown(),
            if total > waiting.len() {
                format!(" (the {} changed last shown: raise --limit for more)", waiting.len())
            } else {
                String::new()
            }
        );
        for w in &waiting {
            let r = &w.view.record;
            say!();
            say!("{} (fence {}, attempt {})", r.key, r.fence, r.attempts);
            say!("  operation: {}", w.operation.line(OPERATION_CHARS));
            say!("  {}", w.why);
            say!(
                "  last held by {} {} on {}",
                r.holder.run_id.as_deref().unwrap_or("-"),
                r.holder.trigger.as_deref().unwrap_or("-"),
                r.holder.who()
            );
            let shown = forensics::shown_events(&w.timeline);
            for (e, shown) in w.timeline.iter().zip(shown) {
                let who = match (&e.actor, &e.holder) {
                    (Some(actor), _) => format!("{actor} (by hand)"),
                    (None, Some(h)) => forensics::shown_holder(h),
                    (None, None) => "(holder of that fence)".into(),
                };
                say!(
                    "    {}  {:<18} fence {:<6} {}{}",
                    when::utc(e.at_ms),
                    shown.as_str(),
                    e.fence,
                    who,
                    e.detail.as_deref().map(|d| format!(": {d}")).unwrap_or_default()
                );
            }
            say!(
                "  settle: idem resolve --store {} {} (--completed | --release | --reject) --reason TEXT",
                args.store.shown(),
                r.key
            );
        }
        say_re_executing(re_executing);
        Ok(SUCCESS)
    })
}

/// The claims that expired with their effect atomic with their end: in
/// progress past their lease, yet no person's work (nothing was done; the
/// next duplicate re-executes each). Said so that an operator counting
/// expired claims knows where they went.
fn say_re_executing(count: usize) {
    if count > 0 {
        say!(
            "{count} expired claim{} of an effect atomic with its end {} not wait for review: nothing was done, and the next duplicate of {} re-executes it",
            if count == 1 { "" } else { "s" },
            if count == 1 { "does" } else { "do" },
            if count == 1 {
                "its operation"
            } else {
                "each operation"
            },
        );
    }
}
