//! Why did it run twice: the attempt log read back as duplicates, their
//! causes, and the runs involved.
//!
//! The store keeps an append-only attempt log (`idem_store::AttemptEntry`):
//! every claim, answer, end, refused late write and resolution, with the
//! run, trigger, host and pid of the caller and a digest of the business
//! operation. [`analyse`] reads a slice of it and names, for every key
//! asked for more than once, the cause ([`Cause`]); each cause has its own
//! fix upstream (a scheduler timeout shorter than the job, two instances
//! of a cron, an operator re-running by hand, a policy change). Key drift
//! (the same business operation under two keys) is the one duplicate idem
//! could not have caught, so it is listed first. A combination the rules
//! do not recognise is reported as [`Cause::Unrecognised`], never forced
//! into a class.
//!
//! [`analyse`] is a pure function over entries: no store access, so the
//! same history gives the same report on every store. [`review`] lists the
//! records waiting for a person (outcome unknown, or in progress
//! past their lease) with their timelines; `Records::resolve` settles one.

mod classify;
mod events;
mod explain;
pub mod operation;
pub mod report;
pub mod review;
mod runs;

use std::collections::{BTreeMap, HashMap};

use idem_store::{AttemptEntry, Digest, RecordKey};
use serde::Serialize;

use classify::classify_key;
pub use events::{ShownEvent, shown_events};
pub use explain::explain_this_process;
pub use operation::ShownOperation;
pub use review::read_log;
pub(crate) use runs::{Activity, Spans, process_of};
pub use runs::{Caller, RunSummary, Settled, caller_of, runs_of, shown_holder};
use runs::{run_spans, run_summaries};

/// Why an operation was asked for more than once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum Cause {
    /// The same business operation under two policy versions and two keys:
    /// idem could not have caught this one (see `idem diff`).
    KeyDrift,
    /// A crash (or pause) mid-effect: a later attempt took over an earlier
    /// one that was still in progress (its lease expired: the holder paused
    /// or crashed), or a later caller found it lapsed and the policy sent
    /// it to review; the earlier holder was fenced when it came back, or
    /// never came back. When the
    /// earlier attempt's effect was atomic with its end, the explanation
    /// says so: it did nothing, and the take-over re-executed it.
    TakeOverAfterPause,
    /// A run triggered as a retry began while the first attempt was still
    /// in progress or lost: the scheduler's timeout is shorter than the job.
    SchedulerRetry,
    /// Two runs' attempts interleaved: two instances of the job at once.
    Overlap,
    /// A run started by hand after the first run ended.
    ManualRerun,
    /// A later run after the first run ended, its trigger not saying why
    /// (or the same run id used again by a later process).
    Rerun,
    /// A caller asking again: a request that named no run (HTTP, a
    /// sidecar's client), the trigger `client`, or one process of a run
    /// asking for a key twice.
    ClientRetry,
    /// A combination the rules do not recognise.
    Unrecognised,
}

impl Cause {
    /// Every cause, in the order a report lists them (key drift first).
    pub const ALL: [Cause; 8] = [
        Cause::KeyDrift,
        Cause::TakeOverAfterPause,
        Cause::SchedulerRetry,
        Cause::Overlap,
        Cause::ManualRerun,
        Cause::Rerun,
        Cause::ClientRetry,
        Cause::Unrecognised,
    ];

    /// A stable name (`key-drift`, `take-over-after-pause`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Cause::KeyDrift => "key-drift",
            Cause::TakeOverAfterPause => "take-over-after-pause",
            Cause::SchedulerRetry => "scheduler-retry",
            Cause::Overlap => "overlap",
            Cause::ManualRerun => "manual-rerun",
            Cause::Rerun => "rerun",
            Cause::ClientRetry => "client-retry",
            Cause::Unrecognised => "unrecognised",
        }
    }

    /// A phrase for people.
    pub fn describe(self) -> &'static str {
        match self {
            Cause::KeyDrift => {
                "key drift: the same operation under two policy versions and two keys (idem could not catch this)"
            }
            Cause::TakeOverAfterPause => "take-over after a pause or crash",
            Cause::SchedulerRetry => {
                "the scheduler retried while the first attempt was in progress or lost"
            }
            Cause::Overlap => "two instances of the job overlapped",
            Cause::ManualRerun => "a re-run by hand after the first run had stopped",
            Cause::Rerun => "a re-run after the first run had stopped",
            Cause::ClientRetry => "a client retry (or one caller asking again)",
            Cause::Unrecognised => "a combination the classifier does not recognise",
        }
    }
}

impl std::fmt::Display for Cause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One key asked for more than once (or one business operation under two
/// keys), and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Duplicate {
    /// The record (for key drift: the later key).
    #[serde(serialize_with = "ser_key")]
    pub key: RecordKey,
    /// Why.
    pub cause: Cause,
    /// What happened, in a sentence, with the runs, fences and times.
    pub explanation: String,
    /// The runs (or processes) that asked, in order of their first ask.
    pub runs: Vec<String>,
    /// How many times it was asked (claims, take-overs and answers).
    pub asks: usize,
    /// How many of those started the effect (a fresh claim or a
    /// take-over) and may have had it: more than one means the effect may
    /// have happened more than once, and only downstream deduplication by
    /// the key (or, for key drift, nothing) stood in the way. An attempt
    /// whose claim expired with its effect atomic with its end is not
    /// counted: its take-over proves it did nothing
    /// ([`idem_store::EXPIRED_WITHOUT_EFFECT`]).
    pub executions: usize,
    /// How many late writes of a deposed holder were refused.
    pub fenced: usize,
    /// For key drift: the other key, and the two policy digests.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub drift: Option<Drift>,
    /// The business operation behind the key, once looked up
    /// ([`Analysis::look_up_operations`]); `None` before, or when the
    /// record is gone.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub operation: Option<ShownOperation>,
}

/// The two sides of a key drift.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Drift {
    /// The earlier key.
    #[serde(serialize_with = "ser_key")]
    pub earlier_key: RecordKey,
    /// The policy that derived the earlier key.
    pub earlier_policy: String,
    /// The policy that derived the later key.
    pub later_policy: String,
}

fn ser_key<S: serde::Serializer>(key: &RecordKey, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&key.to_string())
}

/// What [`analyse`] found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Analysis {
    /// How many entries were read.
    pub entries: usize,
    /// How many keys they are about.
    pub keys: usize,
    /// Every duplicate, key drift first, then by cause and first entry.
    pub duplicates: Vec<Duplicate>,
    /// The runs, by their first entry (a person's resolution is not a
    /// run: see `settled`).
    pub runs: Vec<RunSummary>,
    /// Records settled by a person, oldest first.
    pub settled: Vec<Settled>,
    /// The keys asked most often (at most ten), most first.
    pub busiest: Vec<(String, usize)>,
}

impl Analysis {
    /// How many duplicates have `cause`.
    pub fn count(&self, cause: Cause) -> usize {
        self.duplicates.iter().filter(|d| d.cause == cause).count()
    }

    /// The causes found, with their counts, in [`Cause::ALL`] order.
    pub fn causes(&self) -> Vec<(Cause, usize)> {
        Cause::ALL
            .into_iter()
            .map(|c| (c, self.count(c)))
            .filter(|(_, n)| *n > 0)
            .collect()
    }

    /// Sets the `idem_duplicates{cause}` gauges (the `metrics` facade) to
    /// this analysis's counts, every cause included (0 when absent): call it
    /// after analysing a window of the log, e.g. from a periodic job.
    pub fn publish_metrics(&self) {
        for cause in Cause::ALL {
            metrics::gauge!("idem_duplicates", "cause" => cause.as_str())
                .set(self.count(cause) as f64);
        }
    }

    /// One line per cause for a summary (`1 duplicate prevented: take-over
    /// after a pause or crash (…)`), empty when nothing ran twice. A
    /// duplicate that ran the effect again (a take-over, or a retry after
    /// a failed attempt) is not counted as prevented.
    pub fn summary_lines(&self) -> Vec<String> {
        self.causes()
            .into_iter()
            .map(|(cause, n)| {
                let of_cause = || self.duplicates.iter().filter(move |d| d.cause == cause);
                let example = of_cause()
                    .next()
                    .map(|d| d.explanation.clone())
                    .unwrap_or_default();
                let plural = if n == 1 { "" } else { "s" };
                let again = of_cause().filter(|d| d.executions > 1).count();
                let what = if cause == Cause::KeyDrift {
                    "NOT prevented".to_string()
                } else if again == 0 {
                    "prevented".to_string()
                } else if again == n {
                    "where the effect ran again".to_string()
                } else {
                    format!(
                        "({} prevented, {again} where the effect ran again)",
                        n - again
                    )
                };
                format!(
                    "{n} duplicate{plural} {what}: {} ({example})",
                    cause.describe()
                )
            })
            .collect()
    }

    /// Looks up the business operation behind each duplicate's key (one
    /// store read per key, at most `max` keys: the first ones listed), for
    /// a person deciding about them.
    pub async fn look_up_operations(
        &mut self,
        store: &idem_store::Store,
        max: usize,
    ) -> Result<(), idem_store::StoreError> {
        let keys: Vec<RecordKey> = self
            .duplicates
            .iter()
            .take(max)
            .map(|d| d.key.clone())
            .collect();
        let found = operation::operations_of(store, &keys).await?;
        for d in self.duplicates.iter_mut() {
            d.operation = found.get(&d.key).cloned();
        }
        Ok(())
    }
}

/// Classifies a slice of the attempt log (any order; each key's entries
/// are read in time order). Entries of a key outside the slice are not seen: read a
/// window wide enough to hold the runs you ask about.
pub fn analyse(entries: &[AttemptEntry]) -> Analysis {
    let mut by_key: BTreeMap<&RecordKey, Vec<&AttemptEntry>> = BTreeMap::new();
    for entry in entries {
        by_key.entry(&entry.key).or_default().push(entry);
    }
    // Time order: an answer is written a little after it is given, so its
    // id may come after later changes; its time does not.
    for timeline in by_key.values_mut() {
        timeline.sort_by_key(|e| (e.at_ms, e.id));
    }
    let spans = run_spans(entries);
    let mut duplicates: Vec<Duplicate> = by_key
        .values()
        .filter_map(|timeline| classify_key(timeline, &spans))
        .collect();
    duplicates.extend(key_drift(&by_key));
    let first_id = |d: &Duplicate| {
        by_key
            .get(&d.key)
            .and_then(|t| t.first())
            .map_or(0, |e| e.id)
    };
    duplicates.sort_by_key(|d| (d.cause, first_id(d)));

    let mut busiest: Vec<(String, usize)> = by_key
        .iter()
        .map(|(key, timeline)| {
            (
                key.to_string(),
                timeline.iter().filter(|e| is_ask(e)).count(),
            )
        })
        .filter(|(_, asks)| *asks > 1)
        .collect();
    busiest.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    busiest.truncate(10);

    let mut settled: Vec<Settled> = entries
        .iter()
        .filter(|e| e.event.is_resolution())
        .map(|e| Settled {
            key: e.key.clone(),
            resolution: e.event.as_str(),
            by: e.actor.clone(),
            reason: e.detail.clone(),
            at_ms: e.at_ms,
            fence: e.fence,
        })
        .collect();
    settled.sort_by_key(|s| s.at_ms);

    Analysis {
        entries: entries.len(),
        keys: by_key.len(),
        duplicates,
        runs: run_summaries(entries),
        settled,
        busiest,
    }
}

/// Whether the entry is a caller asking for the key: a claim, take-over
/// or answer (an end, a refusal or a resolution is not).
pub(crate) fn is_ask(entry: &AttemptEntry) -> bool {
    entry.event.starts_execution() || entry.event.is_answer()
}

/// Business operations executed under more than one key: for each, the
/// key that came later, against the first.
fn key_drift(by_key: &BTreeMap<&RecordKey, Vec<&AttemptEntry>>) -> Vec<Duplicate> {
    // Each key's first execution that names its operation.
    let mut firsts: Vec<(&AttemptEntry, Digest)> = by_key
        .values()
        .filter_map(|timeline| {
            timeline
                .iter()
                .find(|e| e.event.starts_execution() && e.operation_digest.is_some())
                .and_then(|e| Some((*e, e.operation_digest?)))
        })
        .collect();
    firsts.sort_by_key(|(e, _)| e.id);
    let mut seen: HashMap<Digest, &AttemptEntry> = HashMap::new();
    let mut out = Vec::new();
    for (entry, operation) in firsts {
        let Some(earlier) = seen.get(&operation) else {
            seen.insert(operation, entry);
            continue;
        };
        let runs: Vec<String> = [caller_of(earlier), caller_of(entry)]
            .into_iter()
            .flatten()
            .map(|caller| caller.to_string())
            .collect();
        let policy = |e: &AttemptEntry| e.policy_digest.clone().unwrap_or_default();
        let same_policy = policy(earlier) == policy(entry);
        let explanation = format!(
            "operation {} ran under key {} ({}) and again under key {} ({}){}",
            short(&operation.to_hex()),
            short(&earlier.key.digest.to_hex()),
            short_policy(&policy(earlier)),
            short(&entry.key.digest.to_hex()),
            short_policy(&policy(entry)),
            if same_policy {
                "; the same policy derived both (it reads something that changed)"
            } else {
                ""
            }
        );
        out.push(Duplicate {
            key: entry.key.clone(),
            cause: Cause::KeyDrift,
            explanation,
            runs,
            asks: 2,
            executions: 2,
            fenced: 0,
            drift: Some(Drift {
                earlier_key: earlier.key.clone(),
                earlier_policy: policy(earlier),
                later_policy: policy(entry),
            }),
            operation: None,
        });
    }
    out
}

/// The first 12 hex characters, for sentences.
pub(crate) fn short(hex: &str) -> &str {
    &hex[..hex.len().min(12)]
}

fn short_policy(digest: &str) -> String {
    let hex = digest.strip_prefix("sha256:").unwrap_or(digest);
    format!("policy {}", short(hex))
}

/// A duration in ms as people read it: `850ms`, `42s`, `6m41s`, `2h05m`.
pub fn human_ms(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        0 => format!("{ms}ms"),
        1..=59 => format!("{s}s"),
        60..=3599 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
    }
}

#[cfg(test)]
mod tests;
