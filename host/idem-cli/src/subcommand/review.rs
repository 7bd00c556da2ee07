//! `idem review`: the records waiting for a person (outcome unknown, or in
//! progress past their lease unless their effect is atomic with their
//! end), each with its timeline; `idem resolve` settles one.

use clap::Args;
use idem::forensics::report::RecordReport;
use idem::forensics::review::{re_executing_records_matching, waiting_for_review_matching};
use idem_core::RecordState;
use idem_store::ListFilter;

use crate::exit::{Failure, SUCCESS};
use crate::report;
use crate::shown::say;
use crate::store_args::{StoreArgs, runtime};
use crate::subcommand::inspect::field_filter;

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
        let waiting: Vec<RecordReport> = waiting
            .into_iter()
            .map(|w| RecordReport::of(w.view, &w.timeline))
            .collect();
        if args.json {
            let out: Vec<serde_json::Value> =
                waiting.iter().map(report::json::waiting_record).collect();
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
            say!(
                "nothing{} waits for review in {}",
                that_match(1),
                args.store.shown()
            );
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
                format!(
                    " (the {} changed last shown: raise --limit for more)",
                    waiting.len()
                )
            } else {
                String::new()
            }
        );
        for record in &waiting {
            report::text::waiting_record(record, &args.store.shown());
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
