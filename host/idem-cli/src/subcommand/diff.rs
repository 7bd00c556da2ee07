//! `idem diff`: what an upgrade of a policy changes, before it is made.

use std::io::BufRead;
use std::path::PathBuf;

use clap::Args;
use idem::lifecycle::{Aspect, DiffReport, Differ, diff_store};
use idem_core::Operation;

use crate::exit::{Failure, KEYS_WOULD_CHANGE, SUCCESS};
use crate::input::shown;
use crate::policy_args::RuntimeArgs;
use crate::shown::say;
use crate::store_args::{StoreArgs, runtime};

/// `idem diff`'s flags.
#[derive(Args, Debug)]
pub struct DiffArgs {
    /// The version in use (.wasm).
    #[arg(long, value_name = "A.wasm")]
    pub old: PathBuf,
    /// The candidate (.wasm).
    #[arg(long, value_name = "B.wasm")]
    pub new: PathBuf,
    /// Operations to compare, one JSON operation a line (an `idem run`
    /// operations file).
    #[arg(
        long,
        value_name = "CORPUS.jsonl",
        required_unless_present = "store",
        conflicts_with = "store"
    )]
    pub ops: Option<PathBuf>,
    /// Compare every record the store keeps within retention in the old
    /// version's namespace, from the operation kept with it.
    #[arg(long, value_name = "URL")]
    pub store: Option<String>,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub runtime: RuntimeArgs,
}

/// Runs `idem diff`.
pub fn run(args: DiffArgs) -> Result<u8, Failure> {
    let runtime_ = args.runtime.runtime()?;
    let old = runtime_.load(&args.old)?;
    let new = runtime_.load(&args.new)?;
    let (report, source) = match (&args.ops, &args.store) {
        (Some(path), _) => {
            let mut differ = Differ::new(&old, &new);
            read_corpus(path, &old, |line, op, now| {
                differ.operation(format!("line {line}"), &op, now)
            })?;
            (differ.finish(), path.display().to_string())
        }
        (None, Some(url)) => {
            let store_args = StoreArgs {
                store: url.clone(),
                no_keep_operations: false,
            };
            let report = runtime()?.block_on(async {
                let store = store_args.open_existing().await?;
                diff_store(&old, &new, &store)
                    .await
                    .map_err(|e| Failure::input(format!("reading {}: {e}", store_args.shown())))
            })?;
            (report, store_args.shown())
        }
        (None, None) => unreachable!("clap requires --ops or --store"),
    };
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).unwrap_or_default()
        );
    } else {
        // Operations' values are shown: each line escaped.
        for line in render(&report, &source).lines() {
            say!("{line}");
        }
    }
    if report.keeps_keys() {
        Ok(SUCCESS)
    } else {
        Err(Failure {
            code: KEYS_WOULD_CHANGE,
            message: format!(
                "{} key{} would change: within retention, the new version would not find {} record{} and would run {} effect{} again",
                report.key_changes,
                plural(report.key_changes),
                if report.key_changes == 1 {
                    "its"
                } else {
                    "their"
                },
                plural(report.key_changes),
                if report.key_changes == 1 {
                    "its"
                } else {
                    "their"
                },
                plural(report.key_changes),
            ),
        })
    }
}

/// Reads a corpus line by line, calling `each(line, op, now_ms)`; a line
/// that is not an operation stops the diff, named.
fn read_corpus(
    path: &PathBuf,
    policy: &idem::policy::LoadedPolicy,
    mut each: impl FnMut(usize, Operation, u64),
) -> Result<(), Failure> {
    let file = std::fs::File::open(path)
        .map_err(|e| Failure::input(format!("cannot read {}: {e}", path.display())))?;
    let now_ms = idem_store::StoreClock::system().now_ms();
    for (i, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line =
            line.map_err(|e| Failure::input(format!("cannot read {}: {e}", path.display())))?;
        if line.trim().is_empty() {
            continue;
        }
        let op = Operation::from_json(&line, &policy.limits().operation).map_err(|e| {
            Failure::input(format!(
                "{} line {}: {e}: {}",
                path.display(),
                i + 1,
                shown(&line)
            ))
        })?;
        each(i + 1, op, now_ms);
    }
    Ok(())
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

fn aspect(a: Aspect) -> &'static str {
    match a {
        Aspect::Key => "key",
        Aspect::Fingerprint => "fingerprint",
        Aspect::Partition => "partition",
        Aspect::NewRefuses => "refused by the new version",
        Aspect::OldRefused => "refused by the old version",
    }
}

/// The text report.
fn render(r: &DiffReport, source: &str) -> String {
    let short = |d: &str| d.chars().take(19).collect::<String>() + "…";
    let mut out = format!(
        "{} {} ({}) -> {} {} ({})\n{} operation{} compared ({source}): {} unchanged, {} changed\n",
        r.old.name,
        r.old.version,
        short(&r.old.digest),
        r.new.name,
        r.new.version,
        short(&r.new.digest),
        r.compared,
        plural(r.compared),
        r.unchanged,
        r.compared - r.unchanged,
    );
    for g in &r.groups {
        let what: Vec<&str> = g.changes.iter().map(|a| aspect(*a)).collect();
        out.push_str(&format!(
            "\n{} ({}): {}\n",
            what.join(" + "),
            g.count,
            g.explanation.join("; ")
        ));
        for e in &g.examples {
            let brief = |d: &Option<idem::lifecycle::diff::Derived>| match d {
                Some(d) => format!("key {} partition {}", &d.key[..16], d.partition),
                None => "refused".to_string(),
            };
            out.push_str(&format!(
                "  {}: {} -> {}\n",
                e.source,
                brief(&e.old),
                brief(&e.new)
            ));
        }
        if g.count > g.examples.len() {
            out.push_str(&format!("  … and {} more\n", g.count - g.examples.len()));
        }
    }
    for n in &r.not_diffable {
        out.push_str(&format!(
            "\nnot diffable ({}): {}: {}\n",
            n.count,
            n.reason,
            n.examples.join(", ")
        ));
    }
    out
}
