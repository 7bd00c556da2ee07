//! One report model: what `idem report`, `idem review`, `idem serve`'s
//! `/v1/report` and the console's record page show, read once from the
//! store's records and attempt log. Each face renders it (the CLI as text
//! and JSON, the console and `idem report --html` as HTML) and repeats none
//! of its steps.
//!
//! - [`read_report`]: the log a [`ReportScope`] selects, analysed, with the
//!   operation behind each duplicate;
//! - [`waiting_now`]: what waits for a person among the same records, and
//!   the `idem review` that lists it ([`ReportScope::review_command`]);
//! - [`RecordReport`]: one record (its operation, whether it waits and
//!   why, its timeline with who did what, who settled it and why, whether
//!   a person's decision may be amended, the cause when it ran twice, and
//!   the `idem resolve` that settles it).

use std::collections::BTreeSet;

use idem_store::{
    AttemptEntry, AttemptEvent, AttemptFilter, ListFilter, RecordKey, RecordState, RecordView,
    Store, StoreError,
};

use super::review::{timeline, waiting_records_matching, waits_for_review};
use super::{
    Analysis, Duplicate, Settled, ShownEvent, ShownOperation, analyse, caller_of, read_log,
    shown_events, shown_holder,
};

/// Up to this many records selected by a state or fields, a report reads
/// each one's entries by its key; past it, the window's whole log once (a
/// few keys among millions of entries must not cost a scan of the log, nor
/// thousands of keys thousands of reads).
const KEYS_READ_ONE_BY_ONE: usize = 1_000;

/// Which part of the store a report is about (every part optional).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReportScope {
    /// Only this namespace.
    pub namespace: Option<String>,
    /// Only entries at or after this time (store clock, ms).
    pub since_ms: Option<u64>,
    /// Only entries before this time.
    pub until_ms: Option<u64>,
    /// Only this key's entries.
    pub key: Option<RecordKey>,
    /// Only the keys this caller asked for (a run id, a caller's name or
    /// `host:pid`, as reports print it), with every caller's entries on
    /// them.
    pub run_id: Option<String>,
    /// Only the keys of records now in this state.
    pub state: Option<RecordState>,
    /// Only the keys of records whose operation has these fields with these
    /// values (all of them).
    pub fields: Vec<(String, String)>,
}

impl ReportScope {
    /// The records it selects, as `idem inspect` reads them.
    pub fn records(&self) -> ListFilter {
        ListFilter {
            namespace: self.namespace.clone(),
            state: self.state,
            fields: self.fields.clone(),
            ..ListFilter::default()
        }
    }

    /// Whether it selects records by their state or fields.
    fn selects_records(&self) -> bool {
        self.state.is_some() || !self.fields.is_empty()
    }

    /// The `idem review` that lists what waits among the records it
    /// selects, on `store` (as a person would type it): the same
    /// namespace, state and fields, each value quoted for a shell when it
    /// needs to be, and escaped (a person's text).
    pub fn review_command(&self, store: &str) -> String {
        let mut command = format!("idem review --store {store}");
        if let Some(ns) = &self.namespace {
            command.push_str(&format!(" --namespace {ns}"));
        }
        if let Some(state) = self.state {
            command.push_str(&format!(" --state {}", state.as_str()));
        }
        for (name, value) in &self.fields {
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
}

/// A report over a part of the attempt log.
#[derive(Debug, Clone)]
pub struct Report {
    /// The entries read, in the log's order.
    pub entries: Vec<AttemptEntry>,
    /// What they say: duplicates, runs, settlements.
    pub analysis: Analysis,
}

/// Reads the entries `scope` selects and analyses them, looking up the
/// operation behind at most `operations` duplicates (one store read
/// each).
pub async fn read_report(
    store: &Store,
    scope: &ReportScope,
    operations: usize,
) -> Result<Report, StoreError> {
    let filter = AttemptFilter {
        namespace: scope.namespace.clone(),
        key: scope.key.clone(),
        since_ms: scope.since_ms,
        until_ms: scope.until_ms,
        ..AttemptFilter::default()
    };
    // A state or fields select records, as `idem inspect` does (the same
    // filter); the report is then about their keys.
    let selected: Option<BTreeSet<RecordKey>> = if scope.selects_records() {
        let views = store.records().list(scope.records()).await?;
        Some(views.into_iter().map(|v| v.record.key).collect())
    } else {
        None
    };
    let mut entries = match &selected {
        Some(keys) if scope.key.is_none() && keys.len() <= KEYS_READ_ONE_BY_ONE => {
            let mut entries = Vec::new();
            for key in keys {
                let by_key = AttemptFilter {
                    key: Some(key.clone()),
                    ..filter.clone()
                };
                entries.extend(read_log(store, by_key).await?);
            }
            entries.sort_by_key(|e| e.id);
            entries
        }
        _ => read_log(store, filter).await?,
    };
    if let Some(keys) = &selected {
        entries.retain(|e| keys.contains(&e.key));
    }
    if let Some(run) = &scope.run_id {
        let keys: BTreeSet<_> = entries
            .iter()
            .filter(|e| caller_of(e).is_some_and(|c| c.to_string() == *run))
            .map(|e| e.key.clone())
            .collect();
        entries.retain(|e| keys.contains(&e.key));
    }
    let mut analysis = analyse(&entries);
    analysis.look_up_operations(store, operations).await?;
    Ok(Report { entries, analysis })
}

/// The records waiting for a person, as a report leads with them.
#[derive(Debug, Clone)]
pub struct WaitingNow {
    /// How many wait, in all.
    pub total: usize,
    /// The first few, most recently changed first: the record, why it
    /// waits, its operation.
    pub first: Vec<(RecordView, &'static str, ShownOperation)>,
    /// The command that lists them all.
    pub command: String,
}

/// What waits for a person among the records `scope` selects (its time
/// window and run aside): how many, the first `first` with their
/// operations, and `command`, the one that lists them all.
pub async fn waiting_now(
    store: &Store,
    scope: &ReportScope,
    first: usize,
    command: String,
) -> Result<WaitingNow, StoreError> {
    let waiting = waiting_records_matching(store, &scope.records()).await?;
    Ok(WaitingNow {
        total: waiting.len(),
        first: waiting
            .into_iter()
            .take(first)
            .map(|(view, why)| {
                let operation = ShownOperation::of_record(&view.record);
                (view, why, operation)
            })
            .collect(),
        command,
    })
}

/// One attempt-log entry as every view shows it.
#[derive(Debug, Clone)]
pub struct TimelineEntry {
    /// The entry.
    pub entry: AttemptEntry,
    /// How it reads to a person ([`shown_events`]).
    pub reads_as: ShownEvent,
}

impl TimelineEntry {
    /// Who did it, in words: a person (`alice (by hand)`), the run with
    /// the caller's own name ([`shown_holder`]), or, for a refused write,
    /// which names only its fence, the holder of that fence.
    pub fn who(&self) -> String {
        match (&self.entry.actor, &self.entry.holder) {
            (Some(actor), _) => format!("{actor} (by hand)"),
            (None, Some(h)) => shown_holder(h),
            (None, None) => "(the holder of that fence)".into(),
        }
    }
}

/// `entries` in the order they are read: each with how it reads, in
/// their own order.
pub fn timeline_entries(entries: &[AttemptEntry]) -> Vec<TimelineEntry> {
    entries
        .iter()
        .zip(shown_events(entries))
        .map(|(entry, reads_as)| TimelineEntry {
            entry: entry.clone(),
            reads_as,
        })
        .collect()
}

/// One record as a person deciding about it reads it.
#[derive(Debug, Clone)]
pub struct RecordReport {
    /// The record now.
    pub view: RecordView,
    /// The business operation behind it.
    pub operation: ShownOperation,
    /// Why it waits for a person, when it does.
    pub waits: Option<&'static str>,
    /// Its attempt-log entries, oldest first.
    pub timeline: Vec<TimelineEntry>,
    /// Why it was asked for more than once, when it was.
    pub cause: Option<Duplicate>,
    /// Who settled it by hand and why, oldest first.
    pub settled: Vec<Settled>,
    /// Whether a person's release or rejection wrote its fence, so that a
    /// person may amend it (`Records::amend` checks the same).
    pub amendable: bool,
}

impl RecordReport {
    /// `view`, with its attempt-log entries (`entries`, oldest first).
    pub fn of(view: RecordView, entries: &[AttemptEntry]) -> RecordReport {
        let r = &view.record;
        let amendable = matches!(
            r.state,
            RecordState::FailedPermanent | RecordState::FailedRetryable
        ) && entries
            .iter()
            .rfind(|e| {
                e.fence == r.fence && (e.event.starts_execution() || e.event.is_resolution())
            })
            .is_some_and(|e| {
                matches!(
                    e.event,
                    AttemptEvent::ResolvedReleased | AttemptEvent::ResolvedRejected
                )
            });
        let analysis = analyse(entries);
        RecordReport {
            operation: ShownOperation::of_record(r),
            waits: waits_for_review(&view),
            timeline: timeline_entries(entries),
            cause: analysis.duplicates.into_iter().next(),
            settled: analysis.settled,
            amendable,
            view,
        }
    }

    /// The record `key` with its timeline, or `None` when there is no
    /// such record.
    pub async fn read(store: &Store, key: &RecordKey) -> Result<Option<RecordReport>, StoreError> {
        let Some(view) = store.records().get(key).await? else {
            return Ok(None);
        };
        let entries = timeline(store, key).await?;
        Ok(Some(RecordReport::of(view, &entries)))
    }

    /// The `idem resolve` that settles it on `store`, to fill in.
    pub fn resolve_command(&self, store: &str) -> String {
        format!(
            "idem resolve --store {store} {} (--completed | --release | --reject) --reason TEXT",
            self.view.record.key
        )
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use idem_core::Digest;
    use idem_store::{
        ClaimOutcome, ClaimRequest, Holder, KeptOperation, ManualClock, MemoryStore, Resolution,
        ResolveRequest, StoreOptions,
    };

    use super::*;

    /// A record whose holder went silent past its lease waits, with its
    /// operation, its timeline and the command that settles it; once a
    /// person refused it, it waits no more, names who and why, and may be
    /// amended.
    #[tokio::test]
    async fn a_record_reads_as_waiting_then_settled_by_a_person() {
        let clock = ManualClock::new(1_000_000);
        let store = Store::from(MemoryStore::new(StoreOptions {
            clock: clock.store_clock(),
            ..StoreOptions::default()
        }));
        let key = RecordKey::new("ns", Digest([3; 32]));
        let claimed = store
            .writes()
            .claim(ClaimRequest {
                key: key.clone(),
                policy_digest: format!("sha256:{}", "ab".repeat(32)),
                fingerprint: Digest([3; 32]),
                partition: "p".into(),
                lease: Duration::from_secs(1),
                retention: Duration::from_secs(3_600),
                holder: Holder::this_process(),
                operation_digest: None,
                operation: Some(KeptOperation::Kept(
                    r#"{"kind":"charge","tenant":"acme","fields":{"invoice_id":"R-189"}}"#.into(),
                )),
                ownership: None,
                effect_atomic: false,
            })
            .await
            .unwrap();
        let ClaimOutcome::Claimed(claim) = claimed else {
            panic!("{claimed:?}");
        };
        clock.advance(Duration::from_secs(2));

        let waiting = RecordReport::read(&store, &key).await.unwrap().unwrap();
        assert!(
            waiting
                .waits
                .is_some_and(|why| why.contains("past its lease"))
        );
        assert_eq!(
            waiting.operation.line(80),
            "charge for acme: invoice_id=R-189"
        );
        assert_eq!(waiting.timeline.len(), 1);
        assert_eq!(waiting.timeline[0].reads_as.as_str(), "executed");
        assert_eq!(
            waiting.timeline[0].who(),
            Holder::this_process().who(),
            "a process with no run"
        );
        assert!(waiting.cause.is_none() && waiting.settled.is_empty() && !waiting.amendable);
        assert_eq!(
            waiting.resolve_command("s.db"),
            format!(
                "idem resolve --store s.db {key} (--completed | --release | --reject) --reason TEXT"
            )
        );

        store
            .records()
            .resolve(ResolveRequest {
                key: key.clone(),
                observed_fence: claim.fence,
                resolution: Resolution::Reject { status: 1 },
                by: "alice".into(),
                reason: "no charge at the provider".into(),
                holder: Holder::this_process(),
            })
            .await
            .unwrap();
        let settled = RecordReport::read(&store, &key).await.unwrap().unwrap();
        assert!(settled.waits.is_none());
        assert!(settled.amendable, "a person's rejection may be amended");
        assert_eq!(settled.settled.len(), 1);
        assert_eq!(settled.settled[0].by.as_deref(), Some("alice"));
        assert_eq!(
            settled.timeline.last().map(TimelineEntry::who).as_deref(),
            Some("alice (by hand)")
        );
        assert!(
            RecordReport::read(&store, &RecordKey::new("ns", Digest([4; 32])))
                .await
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn the_review_command_quotes_what_a_shell_would_split() {
        let scope = ReportScope {
            namespace: Some("billing".into()),
            state: Some(RecordState::OutcomeUnknown),
            fields: vec![
                ("invoice_id".into(), "R-189".into()),
                ("customer".into(), "O'Brien & co".into()),
            ],
            ..ReportScope::default()
        };
        assert_eq!(
            scope.review_command("idem.db"),
            "idem review --store idem.db --namespace billing --state outcome-unknown \
             --field invoice_id=R-189 --field 'customer=O'\\''Brien & co'"
        );
    }
}
