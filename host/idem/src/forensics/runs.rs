//! Who asked: the runs (and processes) in a slice of the attempt log,
//! when each was active, what each was told, and the records a person
//! settled — which are acts, not runs.

use std::collections::{HashMap, HashSet};

use idem_store::{AttemptEntry, AttemptEvent, Holder, RecordKey};
use serde::Serialize;

use super::ser_key;

/// Who asked, as a key: a run, a caller that named itself, or a process.
/// Two of them may read alike (a caller named `web-3:4242` and the process
/// 4242 on `web-3`, or a run id and a name); as keys they never meet.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Caller {
    /// A run id.
    Run(String),
    /// The name a caller gave itself (a client of `idem serve`).
    Named(String),
    /// A process, by host and pid (0 when the log does not give it).
    Process {
        /// Its host name.
        host: String,
        /// Its pid.
        pid: u32,
    },
}

impl Caller {
    /// The holder's name or process, whatever its run.
    pub fn of_holder(holder: &Holder) -> Caller {
        if holder.is_named() {
            Caller::Named(holder.host.clone())
        } else {
            Caller::Process {
                host: holder.host.clone(),
                pid: holder.pid,
            }
        }
    }
}

/// As a person reads it: the run id, the name, or `host:pid`
/// ([`Holder::who`]).
impl std::fmt::Display for Caller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Caller::Run(text) | Caller::Named(text) => f.write_str(text),
            Caller::Process { host, pid } => write!(f, "{host}:{pid}"),
        }
    }
}

/// Who asked: the run, or, when the operation named no run, the name the
/// caller gave itself (a client of `idem serve`) or else its process.
pub fn caller_of(entry: &AttemptEntry) -> Option<Caller> {
    let holder = entry.holder.as_ref()?;
    Some(match &holder.run_id {
        Some(run) => Caller::Run(run.clone()),
        None => Caller::of_holder(holder),
    })
}

/// Whether `event` ends the attempt of its fence (by its holder or by a
/// person).
pub(crate) fn ends_attempt(event: AttemptEvent) -> bool {
    matches!(
        event,
        AttemptEvent::Completed
            | AttemptEvent::FailedRetryable
            | AttemptEvent::FailedPermanent
            | AttemptEvent::ResolvedCompleted
            | AttemptEvent::ResolvedReleased
            | AttemptEvent::ResolvedRejected
    )
}

/// One run's part in the slice of the log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RunSummary {
    /// The run id (or the caller's name, or `host:pid`).
    pub run: String,
    /// Its trigger, as its first entry gave it.
    pub trigger: Option<String>,
    /// Its first and last entries, store clock (ms).
    pub first_ms: u64,
    /// See `first_ms`.
    pub last_ms: u64,
    /// Fresh claims and take-overs: effects it started.
    pub executed: usize,
    /// Answers it got from a stored outcome.
    pub replayed: usize,
    /// Its late writes refused.
    pub fenced: usize,
    /// Attempts of its that ended failed (retryably or for good).
    pub failed: usize,
    /// Expired claims it found and the policy sent to review.
    pub sent_to_review: usize,
    /// Other answers that did not run the effect: in progress, conflict,
    /// and the policy's rejections.
    pub refused: usize,
}

/// A record settled by a person (`idem resolve`, or a review console): an
/// act, not a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Settled {
    /// The record.
    #[serde(serialize_with = "ser_key")]
    pub key: RecordKey,
    /// `resolved-completed`, `resolved-released` or `resolved-rejected`.
    pub resolution: &'static str,
    /// Who settled it, as they named themselves.
    pub by: Option<String>,
    /// Why, as they said.
    pub reason: Option<String>,
    /// When, store clock (ms).
    pub at_ms: u64,
    /// The fence the resolution wrote.
    pub fence: u64,
}

/// When a run was active, as the slice shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Activity {
    /// Its first entry (store clock).
    pub(crate) first_ms: u64,
    /// Its last entry (a refused late write counts: the run was alive).
    pub(crate) last_ms: u64,
    /// When it started the first execution it never finished (it crashed,
    /// paused or was deposed there), if any.
    pub(crate) unfinished_since: Option<u64>,
}

impl Activity {
    /// Whether the run was still going, or had lost an attempt, at `t`.
    pub(crate) fn running_or_lost_at(&self, t: u64) -> bool {
        self.last_ms >= t || self.unfinished_since.is_some_and(|s| s <= t)
    }
}

/// When each run, and each process, was active.
#[derive(Debug, Default)]
pub(crate) struct Spans {
    /// By run (or process, when the caller named no run): [`caller_of`].
    pub(crate) runs: HashMap<Caller, Activity>,
    /// By process (or name): several processes may carry one run id.
    pub(crate) processes: HashMap<Caller, Activity>,
}

/// A holder as a timeline shows it: its run, with the caller's name when
/// it named itself (`rerun-7 (ops@laptop:7)`); without a run, the name or
/// the process (`host:pid`).
pub fn shown_holder(holder: &Holder) -> String {
    match &holder.run_id {
        Some(run) if holder.is_named() => format!("{run} ({})", holder.who()),
        Some(run) => run.clone(),
        None => holder.who(),
    }
}

/// The process (`host:pid`) that wrote an entry, or the name of the
/// caller it wrote it for (a client of `idem serve`), when it names one.
pub(crate) fn process_of(entry: &AttemptEntry) -> Option<Caller> {
    entry.holder.as_ref().map(Caller::of_holder)
}

pub(crate) fn run_spans(entries: &[AttemptEntry]) -> Spans {
    let ended: HashSet<(&RecordKey, u64)> = entries
        .iter()
        .filter(|e| ends_attempt(e.event))
        .map(|e| (&e.key, e.fence))
        .collect();
    let mut spans = Spans::default();
    let see = |map: &mut HashMap<Caller, Activity>, who: Caller, entry: &AttemptEntry| {
        let span = map.entry(who).or_insert(Activity {
            first_ms: entry.at_ms,
            last_ms: entry.at_ms,
            unfinished_since: None,
        });
        span.first_ms = span.first_ms.min(entry.at_ms);
        span.last_ms = span.last_ms.max(entry.at_ms);
        if entry.event.starts_execution() && !ended.contains(&(&entry.key, entry.fence)) {
            span.unfinished_since = Some(
                span.unfinished_since
                    .map_or(entry.at_ms, |s| s.min(entry.at_ms)),
            );
        }
    };
    for (entry, run) in entries.iter().zip(runs_of(entries)) {
        let Some(run) = run else { continue };
        see(&mut spans.runs, run, entry);
        if let Some(process) = process_of(entry) {
            see(&mut spans.processes, process, entry);
        }
    }
    spans
}

/// For each entry, the run (or process, see [`caller_of`]) whose act it
/// is: its caller; for a refused write, which names only its fence, the
/// run that was issued the fence; `None` for a mark-unknown, which names
/// the record's holder but was done to it by whoever found it lost (that
/// caller's answer is an entry of its own), and for a resolution, which is
/// a person's act and not a run (see [`super::Analysis::settled`]).
pub fn runs_of(entries: &[AttemptEntry]) -> Vec<Option<Caller>> {
    let owners = fence_owners(entries);
    entries
        .iter()
        .map(|e| {
            if e.event == AttemptEvent::MarkedUnknown || e.event.is_resolution() {
                return None;
            }
            caller_of(e).or_else(|| owners.get(&(&e.key, e.fence)).cloned())
        })
        .collect()
}

/// Who holds each (key, fence): the caller of the entry that issued it.
fn fence_owners(entries: &[AttemptEntry]) -> HashMap<(&RecordKey, u64), Caller> {
    entries
        .iter()
        .filter(|e| e.event.starts_execution())
        .filter_map(|e| Some(((&e.key, e.fence), caller_of(e)?)))
        .collect()
}

pub(crate) fn run_summaries(entries: &[AttemptEntry]) -> Vec<RunSummary> {
    let shown = super::shown_events(entries);
    let mut runs: Vec<RunSummary> = Vec::new();
    let mut index: HashMap<Caller, usize> = HashMap::new();
    for ((entry, run), shown) in entries.iter().zip(runs_of(entries)).zip(shown) {
        let Some(run) = run else { continue };
        let i = *index.entry(run.clone()).or_insert_with(|| {
            runs.push(RunSummary {
                run: run.to_string(),
                trigger: entry.holder.as_ref().and_then(|h| h.trigger.clone()),
                first_ms: entry.at_ms,
                last_ms: entry.at_ms,
                executed: 0,
                replayed: 0,
                fenced: 0,
                failed: 0,
                sent_to_review: 0,
                refused: 0,
            });
            runs.len() - 1
        });
        let summary = &mut runs[i];
        summary.first_ms = summary.first_ms.min(entry.at_ms);
        summary.last_ms = summary.last_ms.max(entry.at_ms);
        match entry.event {
            AttemptEvent::Executed | AttemptEvent::TakenOver => summary.executed += 1,
            AttemptEvent::Replayed => summary.replayed += 1,
            AttemptEvent::Fenced => summary.fenced += 1,
            AttemptEvent::FailedRetryable | AttemptEvent::FailedPermanent => summary.failed += 1,
            AttemptEvent::Rejected if shown == super::ShownEvent::SentToReview => {
                summary.sent_to_review += 1
            }
            AttemptEvent::InProgress | AttemptEvent::Conflict | AttemptEvent::Rejected => {
                summary.refused += 1
            }
            _ => {}
        }
    }
    runs
}
