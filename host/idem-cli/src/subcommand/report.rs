//! `idem report`: why did it run twice — the duplicates in the attempt log
//! by cause, the runs involved, the busiest keys; one key's timeline with
//! `--key`; a self-contained page with `--html`.

use std::path::PathBuf;

use clap::Args;
use idem::forensics::report::{
    RecordReport, ReportScope, read_report, timeline_entries, waiting_now,
};
use idem_core::RecordState;
use serde_json::json;

use crate::exit::{Failure, SUCCESS};
use crate::shown::tell;
use crate::store_args::{StoreArgs, runtime};
use crate::subcommand::inspect::field_filter;
use crate::{record_key, report, when};

/// How many duplicates' operations a report looks up, at most (one store
/// read each).
const OPERATIONS_LOOKED_UP: usize = 10_000;
/// How many waiting records a report names before pointing at `idem review`.
const WAITING_NAMED: usize = 10;

/// `idem report`'s flags.
#[derive(Args, Debug)]
pub struct ReportArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// Only entries at or after this time: a UTC timestamp
    /// (2026-11-30T02:00:00Z), ms since the epoch, or a duration back from
    /// now (24h).
    #[arg(long, value_name = "T")]
    pub since: Option<String>,
    /// Only entries before this time (same forms as --since).
    #[arg(long, value_name = "T")]
    pub until: Option<String>,
    /// Only the keys this run asked for (with every run's entries on them).
    #[arg(long, value_name = "ID")]
    pub run_id: Option<String>,
    /// Only this namespace.
    #[arg(long)]
    pub namespace: Option<String>,
    /// Only the keys of records now in this state (in-progress, completed,
    /// failed-retryable, failed-permanent, outcome-unknown).
    #[arg(long)]
    pub state: Option<RecordState>,
    /// Only the keys of records whose operation has this field with this
    /// value, as `idem inspect --field` reads it: `--field
    /// invoice_id=R-189`. Repeat it for several fields, all of which must
    /// match.
    #[arg(long, value_name = "NAME=VALUE", value_parser = field_filter)]
    pub field: Vec<(String, String)>,
    /// One key's whole timeline (its 64 hex characters or a prefix that
    /// names one record, optionally as NAMESPACE/KEY).
    #[arg(long, value_name = "KEY")]
    pub key: Option<String>,
    /// JSON instead of text.
    #[arg(long)]
    pub json: bool,
    /// Also write a self-contained page with a timeline picture to FILE.
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
}

/// Runs `idem report`: the scope from the flags, the report read once
/// ([`idem::forensics::report`]), then rendered.
pub fn run(args: ReportArgs) -> Result<u8, Failure> {
    runtime()?.block_on(async {
        let store = args.store.open_existing().await?;
        let now = store.clock().now_ms();
        let since = args
            .since
            .as_deref()
            .map(|t| when::parse(t, now).map_err(|e| Failure::input(format!("--since: {e}"))))
            .transpose()?;
        let until = args
            .until
            .as_deref()
            .map(|t| when::parse(t, now).map_err(|e| Failure::input(format!("--until: {e}"))))
            .transpose()?;
        let read_err = |e| Failure::input(format!("cannot read {}: {e}", args.store.shown()));
        let focus = match &args.key {
            Some(text) => Some(
                record_key::find(&store, text, args.namespace.as_deref(), &args.store.shown())
                    .await?,
            ),
            None => None,
        };
        let scope = ReportScope {
            namespace: args.namespace.clone(),
            since_ms: since,
            until_ms: until,
            key: focus.as_ref().map(|view| view.record.key.clone()),
            run_id: args.run_id.clone(),
            state: args.state,
            fields: args.field.clone(),
        };
        let found = read_report(&store, &scope, OPERATIONS_LOOKED_UP)
            .await
            .map_err(read_err)?;
        let command = scope.review_command(&args.store.shown());
        let waiting = waiting_now(&store, &scope, WAITING_NAMED, command)
            .await
            .map_err(read_err)?;
        let title = format!("idem report: {}", args.store.shown());
        if let Some(path) = &args.html {
            let page = report::page::render(&title, &found.analysis, &found.entries, &waiting);
            std::fs::write(path, page)
                .map_err(|e| Failure::input(format!("cannot write {}: {e}", path.display())))?;
        }
        if args.json {
            let about = [
                ("store", json!(args.store.shown())),
                ("since_ms", json!(since)),
                ("until_ms", json!(until)),
                ("state", json!(args.state.map(RecordState::as_str))),
                (
                    "fields",
                    args.field
                        .iter()
                        .map(|(name, value)| json!({"name": name, "value": value}))
                        .collect(),
                ),
            ];
            let timeline = focus.is_some().then(|| timeline_entries(&found.entries));
            let out = report::json::report(&found, about, &waiting, timeline.as_deref());
            println!("{out:#}");
        } else if let Some(view) = focus {
            report::text::record_timeline(&RecordReport::of(view, &found.entries));
        } else {
            // Said on the report's own line when records were selected, so
            // a narrowed report never reads as the whole store's.
            let mut about = args.store.shown();
            let mut terms: Vec<String> =
                args.field.iter().map(|(n, v)| format!("{n}={v}")).collect();
            if let Some(state) = args.state {
                terms.push(format!("state {}", state.as_str()));
            }
            if !terms.is_empty() {
                about.push_str(&format!(" (records with {})", terms.join(", ")));
            }
            report::text::report(&about, since, until, &found.analysis, &waiting);
        }
        if let Some(path) = &args.html {
            tell!("idem: wrote {}", path.display());
        }
        Ok(SUCCESS)
    })
}
