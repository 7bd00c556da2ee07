//! `idem report`: why did it run twice — the duplicates in the attempt log
//! by cause, the runs involved, the busiest keys; one key's timeline with
//! `--key`; a self-contained page with `--html`.

use std::collections::BTreeSet;
use std::path::PathBuf;

use clap::Args;
use idem::forensics::review::waiting_records_matching;
use idem::forensics::{self, Analysis, ShownEvent, ShownOperation};
use idem_core::RecordState;
use idem_store::{AttemptEntry, AttemptFilter, ListFilter, RecordKey, RecordView};
use serde_json::json;

use crate::exit::{Failure, SUCCESS};
use crate::shown::{say, tell};
use crate::store_args::{StoreArgs, runtime};
use crate::subcommand::inspect::field_filter;
use crate::subcommand::review::OPERATION_CHARS;
use crate::{record_key, report_page, when};

/// How many duplicates' operations a report looks up, at most (one store
/// read each).
const OPERATIONS_LOOKED_UP: usize = 10_000;
/// How many waiting records a report names before pointing at `idem review`.
const WAITING_NAMED: usize = 10;
/// Up to this many records selected by `--field` or `--state`, a report
/// reads each one's entries by its key; past it, the window's whole log
/// once (a few keys among millions of entries must not cost a scan of
/// the log, nor thousands of keys thousands of reads).
const KEYS_READ_ONE_BY_ONE: usize = 1_000;

/// The records waiting for a person, as a report leads with them.
pub struct WaitingNow {
    /// How many wait, in all.
    pub total: usize,
    /// The first few, most recently changed first: the record, why it
    /// waits, its operation.
    pub first: Vec<(RecordView, &'static str, ShownOperation)>,
    /// The command that lists them all.
    pub command: String,
}

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

/// Runs `idem report`.
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
        let mut filter = AttemptFilter {
            namespace: args.namespace.clone(),
            since_ms: since,
            until_ms: until,
            ..AttemptFilter::default()
        };
        let focus = match &args.key {
            Some(text) => {
                let view =
                    record_key::find(&store, text, args.namespace.as_deref(), &args.store.shown())
                        .await?;
                filter.key = Some(view.record.key.clone());
                Some(view)
            }
            None => None,
        };
        // `--state` and `--field` select records, as `idem inspect` does
        // (the same filter); the report is then about their keys.
        let scope = ListFilter {
            namespace: args.namespace.clone(),
            state: args.state,
            fields: args.field.clone(),
            ..ListFilter::default()
        };
        let selected: Option<BTreeSet<RecordKey>> =
            if args.state.is_some() || !args.field.is_empty() {
                let views = store
                    .records()
                    .list(scope.clone())
                    .await
                    .map_err(read_err)?;
                Some(views.into_iter().map(|v| v.record.key).collect())
            } else {
                None
            };
        let mut entries = match &selected {
            Some(keys) if focus.is_none() && keys.len() <= KEYS_READ_ONE_BY_ONE => {
                let mut entries = Vec::new();
                for key in keys {
                    let by_key = AttemptFilter {
                        key: Some(key.clone()),
                        ..filter.clone()
                    };
                    entries.extend(
                        forensics::read_log(&store, by_key)
                            .await
                            .map_err(read_err)?,
                    );
                }
                entries.sort_by_key(|e| e.id);
                entries
            }
            _ => forensics::read_log(&store, filter)
                .await
                .map_err(read_err)?,
        };
        if let Some(keys) = &selected {
            entries.retain(|e| keys.contains(&e.key));
        }
        if let Some(run) = &args.run_id {
            let keys: BTreeSet<_> = entries
                .iter()
                .filter(|e| forensics::caller_of(e).as_deref() == Some(run.as_str()))
                .map(|e| e.key.clone())
                .collect();
            entries.retain(|e| keys.contains(&e.key));
        }
        let mut analysis = forensics::analyse(&entries);
        analysis
            .look_up_operations(&store, OPERATIONS_LOOKED_UP)
            .await
            .map_err(read_err)?;
        let waiting = waiting_records_matching(&store, &scope)
            .await
            .map_err(read_err)?;
        let waiting = WaitingNow {
            total: waiting.len(),
            first: waiting
                .into_iter()
                .take(WAITING_NAMED)
                .map(|(view, why)| {
                    let operation = ShownOperation::of_record(&view.record);
                    (view, why, operation)
                })
                .collect(),
            command: review_command(&args),
        };
        let title = format!("idem report: {}", args.store.shown());
        if let Some(path) = &args.html {
            let page = report_page::render(&title, &analysis, &entries, &waiting);
            std::fs::write(path, page)
                .map_err(|e| Failure::input(format!("cannot write {}: {e}", path.display())))?;
        }
        if args.json {
            let mut out = serde_json::to_value(&analysis).expect("an analysis serialises");
            out["store"] = json!(args.store.shown());
            out["since_ms"] = json!(since);
            out["until_ms"] = json!(until);
            out["state"] = json!(args.state.map(RecordState::as_str));
            out["fields"] = args
                .field
                .iter()
                .map(|(name, value)| json!({"name": name, "value": value}))
                .collect();
            out["waiting_for_review"] = json!({
                "total": waiting.total,
                "command": waiting.command,
                "first": waiting.first.iter().map(|(view, why, operation)| json!({
                    "key": view.record.key.to_string(),
                    "state": view.record.state.as_str(),
                    "fence": view.record.fence,
                    "why": why,
                    "operation": operation,
                })).collect::<Vec<_>>(),
            });
            if focus.is_some() {
                let shown = forensics::shown_events(&entries);
                out["timeline"] = entries
                    .iter()
                    .zip(shown)
                    .map(|(e, shown)| entry_json(e, shown))
                    .collect();
            }
            println!("{out:#}");
        } else if let Some(view) = &focus {
            let operation = ShownOperation::of_record(&view.record);
            print_timeline(
                &view.record.key.to_string(),
                &operation,
                &analysis,
                &entries,
            );
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
            print_report(&about, since, until, &analysis, &waiting);
        }
        if let Some(path) = &args.html {
            tell!("idem: wrote {}", path.display());
        }
        Ok(SUCCESS)
    })
}

/// The `idem review` that lists what waits among the records the report
/// is about: the same store, namespace, state and fields (each value
/// quoted for a shell when it needs to be, and escaped: a person's text).
fn review_command(args: &ReportArgs) -> String {
    let mut command = format!("idem review --store {}", args.store.shown());
    if let Some(ns) = &args.namespace {
        command.push_str(&format!(" --namespace {ns}"));
    }
    if let Some(state) = args.state {
        command.push_str(&format!(" --state {}", state.as_str()));
    }
    for (name, value) in &args.field {
        let term = idem_core::text::escaped(&format!("{name}={value}")).into_owned();
        let plain = term
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.=:/@+,".contains(c));
        if plain {
            command.push_str(&format!(" --field {term}"));
        } else {
            command.push_str(&format!(" --field '{}'", term.replace('\'', "'\\''")));
        }
    }
    command
}

/// One entry as JSON.
pub fn entry_json(e: &AttemptEntry, shown: ShownEvent) -> serde_json::Value {
    json!({
        "id": e.id,
        "key": e.key.to_string(),
        "fence": e.fence,
        "event": e.event.as_str(),
        "reads_as": shown.as_str(),
        "at_ms": e.at_ms,
        "at": when::utc(e.at_ms),
        "run_id": e.holder.as_ref().and_then(|h| h.run_id.clone()),
        "trigger": e.holder.as_ref().and_then(|h| h.trigger.clone()),
        "attempt": e.holder.as_ref().and_then(|h| h.attempt),
        "host": e.holder.as_ref().map(|h| h.host.clone()),
        "pid": e.holder.as_ref().map(|h| h.pid),
        "who": e.holder.as_ref().map(|h| h.who()),
        "policy": e.policy_digest,
        "operation": e.operation_digest.map(|d| d.to_hex()),
        "actor": e.actor,
        "detail": e.detail,
    })
}

/// A short form of a `namespace/key` for tables.
fn short_key(key: &str) -> String {
    match key.split_once('/') {
        Some((ns, hex)) => format!("{ns}/{}…", &hex[..hex.len().min(12)]),
        None => key.to_string(),
    }
}

/// What waits for a person, said first: how many, the first few with
/// their operations, and the command that lists them all.
fn print_waiting(waiting: &WaitingNow) {
    if waiting.total == 0 {
        say!("nothing waits for review");
        return;
    }
    let plural = if waiting.total == 1 { "" } else { "s" };
    let verb = if waiting.total == 1 { "waits" } else { "wait" };
    say!(
        "{} record{plural} {verb} for review: {}",
        waiting.total,
        waiting.command
    );
    for (view, why, operation) in &waiting.first {
        say!(
            "  {}  {}",
            short_key(&view.record.key.to_string()),
            operation.line(OPERATION_CHARS)
        );
        say!("  {:<16}  {why}", "");
    }
    if waiting.total > waiting.first.len() {
        say!("  … and {} more", waiting.total - waiting.first.len());
    }
}

fn print_report(
    store: &str,
    since: Option<u64>,
    until: Option<u64>,
    a: &Analysis,
    waiting: &WaitingNow,
) {
    print_waiting(waiting);
    say!();
    let window = match (since, until) {
        (None, None) => "the whole log".to_string(),
        (s, u) => format!(
            "{} to {}",
            s.map_or("the start".into(), when::utc),
            u.map_or("now".into(), when::utc)
        ),
    };
    say!(
        "{store}: {} attempt-log entries about {} keys ({window})",
        a.entries,
        a.keys
    );
    say!();
    if a.duplicates.is_empty() {
        say!("no duplicates: every key was asked for once");
    } else {
        say!("duplicates by cause:");
        for (cause, n) in a.causes() {
            let caught = if cause == forensics::Cause::KeyDrift {
                "  (NOT prevented: two keys)"
            } else {
                ""
            };
            say!("  {n:>5}  {}{caught}", cause.describe());
            for d in a.duplicates.iter().filter(|d| d.cause == cause).take(2) {
                say!(
                    "         e.g. {}: {}",
                    short_key(&d.key.to_string()),
                    d.explanation
                );
                if let Some(operation) = &d.operation {
                    say!("              {}", operation.line(OPERATION_CHARS));
                }
            }
        }
    }
    if !a.runs.is_empty() {
        say!();
        say!(
            "{:<28} {:<10} {:<21} {:<21} {:>8} {:>8} {:>6} {:>9} {:>6} {:>7}",
            "run",
            "trigger",
            "first",
            "last",
            "executed",
            "replayed",
            "failed",
            "to review",
            "fenced",
            "refused"
        );
        for r in &a.runs {
            say!(
                "{:<28} {:<10} {:<21} {:<21} {:>8} {:>8} {:>6} {:>9} {:>6} {:>7}",
                r.run,
                r.trigger.as_deref().unwrap_or("-"),
                when::utc(r.first_ms),
                when::utc(r.last_ms),
                r.executed,
                r.replayed,
                r.failed,
                r.sent_to_review,
                r.fenced,
                r.refused
            );
        }
    }
    if !a.settled.is_empty() {
        say!();
        say!("settled by a person:");
        for s in &a.settled {
            say!(
                "  {}  {:<18} {}  by {}: {}",
                when::utc(s.at_ms),
                s.resolution,
                short_key(&s.key.to_string()),
                s.by.as_deref().unwrap_or("(unnamed)"),
                s.reason.as_deref().unwrap_or("(no reason given)")
            );
        }
    }
    if !a.busiest.is_empty() {
        say!();
        say!("keys asked for most:");
        for (key, asks) in &a.busiest {
            say!("  {asks:>5}  {key}");
        }
    }
}

fn print_timeline(key: &str, operation: &ShownOperation, a: &Analysis, entries: &[AttemptEntry]) {
    say!("{key}");
    say!("operation: {}", operation.line(OPERATION_CHARS));
    match a.duplicates.first() {
        Some(d) => say!("cause: {} — {}", d.cause.describe(), d.explanation),
        None => say!("asked for once: no duplicate"),
    }
    say!();
    say!(
        "{:<21} {:<18} {:>7} {:<32} detail",
        "time",
        "event",
        "fence",
        "who"
    );
    let shown = forensics::shown_events(entries);
    let mut sorted: Vec<(&AttemptEntry, ShownEvent)> = entries.iter().zip(shown).collect();
    sorted.sort_by_key(|(e, _)| (e.at_ms, e.id));
    for (e, shown) in sorted {
        let who = match (&e.holder, &e.actor) {
            (_, Some(actor)) => format!("{actor} (by hand)"),
            (Some(h), None) => format!(
                "{} {} #{} {}",
                h.run_id.as_deref().unwrap_or("-"),
                h.trigger.as_deref().unwrap_or("-"),
                h.attempt.map_or("-".into(), |a| a.to_string()),
                h.who()
            ),
            (None, None) => "(the holder of that fence)".into(),
        };
        say!(
            "{:<21} {:<18} {:>7} {:<32} {}",
            when::utc(e.at_ms),
            shown.as_str(),
            e.fence,
            who,
            e.detail.as_deref().unwrap_or("")
        );
    }
}
