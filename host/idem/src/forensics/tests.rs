use idem_store::{AttemptEvent, Holder};

use super::*;

fn entry(
    id: u64,
    key: u8,
    fence: u64,
    event: AttemptEvent,
    run: Option<(&str, &str)>,
    at: u64,
) -> AttemptEntry {
    let mut entry = AttemptEntry::new(RecordKey::new("ns", Digest([key; 32])), fence, event, at);
    entry.id = id;
    entry.holder = run.map(|(run, trigger)| Holder {
        run_id: (!run.is_empty()).then(|| run.to_string()),
        trigger: Some(trigger.to_string()),
        attempt: Some(1),
        host: "h".into(),
        pid: 1,
        named: false,
        token: None,
    });
    entry.policy_digest = Some("sha256:p".into());
    entry.operation_digest = Some(Digest([key; 32]));
    entry
}

#[test]
fn a_client_asking_again_in_the_same_run_is_a_client_retry() {
    let a = Some(("req-1", "client"));
    let log = vec![
        entry(1, 1, 1, AttemptEvent::Executed, a, 10),
        entry(2, 1, 1, AttemptEvent::Completed, a, 20),
        entry(3, 1, 1, AttemptEvent::Replayed, a, 900),
    ];
    let found = analyse(&log);
    assert_eq!(found.causes(), vec![(Cause::ClientRetry, 1)]);
    assert_eq!(found.duplicates[0].asks, 2);
    assert_eq!(
        found.busiest,
        vec![(found.duplicates[0].key.to_string(), 2)]
    );
}

#[test]
fn an_unknown_combination_is_reported_as_such() {
    // A scheduled run long after another one ended: no rule says why.
    let log = vec![
        entry(
            1,
            1,
            1,
            AttemptEvent::Executed,
            Some(("mon", "scheduled")),
            10,
        ),
        entry(
            2,
            1,
            1,
            AttemptEvent::Completed,
            Some(("mon", "scheduled")),
            20,
        ),
        entry(
            3,
            1,
            1,
            AttemptEvent::Replayed,
            Some(("tue", "scheduled")),
            86_400_000,
        ),
    ];
    let found = analyse(&log);
    assert_eq!(found.causes(), vec![(Cause::Unrecognised, 1)]);
    assert!(
        found.duplicates[0]
            .explanation
            .contains("mon (trigger scheduled) then tue")
    );
}

#[test]
fn a_later_run_without_a_trigger_after_the_first_stopped_is_a_rerun() {
    // Key 1 under fence 1, asked by `run` with no trigger.
    let plain = |id, event, run: &str, at| {
        let mut e = entry(id, 1, 1, event, Some((run, "")), at);
        e.holder.as_mut().expect("a holder").trigger = None;
        e
    };
    let log = vec![
        plain(1, AttemptEvent::Executed, "mon", 10),
        plain(2, AttemptEvent::Completed, "mon", 20),
        plain(3, AttemptEvent::Replayed, "tue", 900),
    ];
    let found = analyse(&log);
    assert_eq!(found.causes(), vec![(Cause::Rerun, 1)]);
    assert!(
        found.duplicates[0]
            .explanation
            .contains("mon ran again as tue"),
        "{}",
        found.duplicates[0].explanation
    );
    // Untriggered but at the same time: still an overlap.
    let log = vec![
        plain(1, AttemptEvent::Executed, "mon", 10),
        plain(2, AttemptEvent::InProgress, "tue", 15),
        plain(3, AttemptEvent::Completed, "mon", 20),
    ];
    assert_eq!(analyse(&log).causes(), vec![(Cause::Overlap, 1)]);
}

#[test]
fn a_key_asked_for_once_is_no_duplicate_and_answers_come_in_time_order() {
    let log = vec![
        entry(
            1,
            1,
            1,
            AttemptEvent::Executed,
            Some(("a", "scheduled")),
            10,
        ),
        entry(
            2,
            1,
            1,
            AttemptEvent::Completed,
            Some(("a", "scheduled")),
            20,
        ),
    ];
    assert!(analyse(&log).duplicates.is_empty());
    // An answer written after a later change (its id is higher) is read
    // at its own time: the retry was told "in progress" before the
    // first run completed, so the first run was still going.
    let log = vec![
        entry(
            1,
            2,
            1,
            AttemptEvent::Executed,
            Some(("a", "scheduled")),
            10,
        ),
        entry(
            2,
            2,
            1,
            AttemptEvent::Completed,
            Some(("a", "scheduled")),
            50,
        ),
        entry(3, 2, 1, AttemptEvent::InProgress, Some(("b", "retry")), 30),
    ];
    let found = analyse(&log);
    assert_eq!(found.causes(), vec![(Cause::SchedulerRetry, 1)]);
    assert!(found.duplicates[0].explanation.contains("still running"));
}

#[test]
fn durations_read_as_people_write_them() {
    assert_eq!(human_ms(850), "850ms");
    assert_eq!(human_ms(42_000), "42s");
    assert_eq!(human_ms(401_000), "6m41s");
    assert_eq!(human_ms(7_500_000), "2h05m");
}

/// `entry`, written by process `pid` of host `h`.
fn by_pid(mut e: AttemptEntry, pid: u32) -> AttemptEntry {
    e.holder.as_mut().expect("a holder").pid = pid;
    e
}

#[test]
fn one_run_id_reused_by_a_later_process_is_a_rerun_and_at_once_an_overlap() {
    // The payment-service example's nightly job: every run is `nightly`.
    let nightly = Some(("nightly", "scheduled"));
    let log = vec![
        by_pid(entry(1, 1, 1, AttemptEvent::Executed, nightly, 10), 100),
        by_pid(entry(2, 1, 1, AttemptEvent::Completed, nightly, 20), 100),
        by_pid(entry(3, 1, 1, AttemptEvent::Replayed, nightly, 5_000), 200),
    ];
    let found = analyse(&log);
    assert_eq!(found.causes(), vec![(Cause::Rerun, 1)]);
    let why = &found.duplicates[0].explanation;
    assert!(
        why.contains("nightly ran again under the same run id") && why.contains("h:200"),
        "{why}"
    );
    assert_eq!(found.runs.len(), 1, "one run id, one run: {:?}", found.runs);

    // By hand, under the same run id: a manual re-run.
    let manual = Some(("nightly", "manual"));
    let log = vec![
        by_pid(entry(1, 1, 1, AttemptEvent::Executed, nightly, 10), 100),
        by_pid(entry(2, 1, 1, AttemptEvent::Completed, nightly, 20), 100),
        by_pid(entry(3, 1, 1, AttemptEvent::Replayed, manual, 5_000), 200),
    ];
    assert_eq!(analyse(&log).causes(), vec![(Cause::ManualRerun, 1)]);

    // Two processes of `nightly` at once.
    let log = vec![
        by_pid(entry(1, 1, 1, AttemptEvent::Executed, nightly, 10), 100),
        by_pid(entry(2, 1, 1, AttemptEvent::InProgress, nightly, 15), 200),
        by_pid(entry(3, 1, 1, AttemptEvent::Completed, nightly, 20), 100),
    ];
    let found = analyse(&log);
    assert_eq!(found.causes(), vec![(Cause::Overlap, 1)]);
    assert!(
        found.duplicates[0]
            .explanation
            .contains("two processes of nightly")
    );

    // One process asking twice: its own retry, or the input twice.
    let log = vec![
        entry(1, 1, 1, AttemptEvent::Executed, nightly, 10),
        entry(2, 1, 1, AttemptEvent::Completed, nightly, 20),
        entry(3, 1, 1, AttemptEvent::Replayed, nightly, 30),
    ];
    let found = analyse(&log);
    assert_eq!(found.causes(), vec![(Cause::ClientRetry, 1)]);
    assert!(
        found.duplicates[0]
            .explanation
            .contains("from the same process")
    );
}

#[test]
fn callers_without_a_run_are_client_retries_not_overlapping_jobs() {
    // Two sidecar clients in turn, each naming no run, one process each.
    let client = Some(("", "client"));
    let log = vec![
        by_pid(entry(1, 1, 1, AttemptEvent::Executed, client, 10), 7),
        by_pid(entry(2, 1, 1, AttemptEvent::InProgress, client, 12), 8),
        by_pid(entry(3, 1, 1, AttemptEvent::Completed, client, 20), 7),
        by_pid(entry(4, 1, 1, AttemptEvent::Replayed, client, 40), 9),
    ];
    let found = analyse(&log);
    assert_eq!(found.causes(), vec![(Cause::ClientRetry, 1)]);
    assert!(found.duplicates[0].explanation.contains("named no run"));
}

#[test]
fn a_resolution_is_a_persons_act_not_a_run() {
    let night = Some(("night-1", "scheduled"));
    let mut resolved = entry(
        4,
        1,
        2,
        AttemptEvent::ResolvedCompleted,
        Some(("", "manual")),
        90,
    );
    resolved.actor = Some("ana".into());
    resolved.detail = Some("the provider shows the charge".into());
    let log = vec![
        entry(1, 1, 1, AttemptEvent::Executed, night, 10),
        entry(2, 1, 1, AttemptEvent::MarkedUnknown, night, 60),
        entry(
            3,
            1,
            1,
            AttemptEvent::Rejected,
            Some(("night-2", "manual")),
            60,
        ),
        resolved,
    ];
    let found = analyse(&log);
    let runs: Vec<&str> = found.runs.iter().map(|r| r.run.as_str()).collect();
    assert_eq!(runs, ["night-1", "night-2"], "no run for the resolution");
    assert_eq!(found.settled.len(), 1);
    assert_eq!(found.settled[0].by.as_deref(), Some("ana"));
    assert_eq!(found.settled[0].resolution, "resolved-completed");
    // The re-run found night-1's claim lost and sent it to review.
    assert_eq!(found.runs[1].sent_to_review, 1);
    assert_eq!(found.runs[1].refused, 0);
}

#[test]
fn entries_read_as_what_they_meant() {
    let a = Some(("a", "scheduled"));
    let b = Some(("b", "retry"));
    let log = vec![
        entry(1, 1, 1, AttemptEvent::Executed, a, 10),
        entry(2, 1, 1, AttemptEvent::FailedRetryable, a, 20),
        entry(3, 1, 2, AttemptEvent::TakenOver, b, 30),
        entry(4, 2, 1, AttemptEvent::Executed, a, 10),
        entry(5, 2, 2, AttemptEvent::TakenOver, b, 90),
        entry(6, 3, 1, AttemptEvent::Executed, a, 10),
        entry(7, 3, 1, AttemptEvent::MarkedUnknown, a, 90),
        entry(8, 3, 1, AttemptEvent::Rejected, b, 90),
        entry(9, 4, 1, AttemptEvent::Rejected, b, 90),
    ];
    let shown: Vec<&str> = shown_events(&log).iter().map(|s| s.as_str()).collect();
    assert_eq!(
        shown,
        [
            "executed",
            "failed-retryable",
            "retried",
            "executed",
            "taken-over",
            "executed",
            "marked-unknown",
            "sent-to-review",
            "rejected",
        ]
    );
}

#[test]
fn a_duplicate_that_ran_the_effect_again_is_not_called_prevented() {
    let a = Some(("a", "scheduled"));
    let b = Some(("b", "retry"));
    // Key 1: b took over a's lapsed claim and ran it again. Key 2: b
    // found a's still running.
    let log = vec![
        entry(1, 1, 1, AttemptEvent::Executed, a, 10),
        entry(2, 1, 2, AttemptEvent::TakenOver, b, 90),
        entry(3, 2, 1, AttemptEvent::Executed, a, 10),
        entry(4, 2, 1, AttemptEvent::InProgress, b, 20),
        entry(5, 2, 1, AttemptEvent::Completed, a, 30),
    ];
    let lines = analyse(&log).summary_lines();
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("1 duplicate where the effect ran again: take-over")),
        "{lines:?}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("1 duplicate prevented: the scheduler retried")),
        "{lines:?}"
    );
}

/// `entry` (no run), by a client of `idem serve` that named itself.
fn by_caller(mut e: AttemptEntry, name: &str) -> AttemptEntry {
    let caller = idem_store::CallerName::parse(name).expect("a caller name");
    e.holder = Some(Holder::named(&caller));
    e
}

#[test]
fn a_named_client_killed_mid_effect_its_retry_and_a_re_run_are_told_apart() {
    let (first, again, ops) = ("billing@web-3:101", "billing@web-3:102", "ops@laptop:7");
    // Key 1: the first client claimed and was killed; its restarted
    // process found the claim lapsed and the policy sent it to review.
    // Key 2: one client asked twice (its answer lost): a retry. Key 3:
    // another caller asked long after the first had stopped: a re-run.
    let log = vec![
        by_caller(entry(1, 1, 1, AttemptEvent::Executed, None, 10), first),
        by_caller(entry(2, 2, 1, AttemptEvent::Executed, None, 20), first),
        by_caller(entry(3, 2, 1, AttemptEvent::Completed, None, 30), first),
        by_caller(entry(4, 2, 1, AttemptEvent::Replayed, None, 40), first),
        by_caller(entry(5, 3, 1, AttemptEvent::Executed, None, 50), first),
        by_caller(entry(6, 3, 1, AttemptEvent::Completed, None, 60), first),
        by_caller(
            entry(7, 1, 1, AttemptEvent::MarkedUnknown, None, 70_000),
            first,
        ),
        by_caller(entry(8, 1, 1, AttemptEvent::Rejected, None, 70_000), again),
        by_caller(entry(9, 3, 1, AttemptEvent::Replayed, None, 90_000), ops),
    ];
    let found = analyse(&log);
    let cause = |key: u8| {
        let d = found
            .duplicates
            .iter()
            .find(|d| d.key.digest == Digest([key; 32]))
            .expect("a duplicate");
        (d.cause, d.explanation.clone(), d.runs.clone())
    };
    let (crash, why, runs) = cause(1);
    assert_eq!(crash, Cause::TakeOverAfterPause, "{why}");
    assert!(
        why.starts_with("billing@web-3:101 started it at fence 1")
            && why.contains("billing@web-3:102 asked")
            && why.contains("sent to review"),
        "{why}"
    );
    assert_eq!(runs, vec![first, again]);
    let (retry, why, _) = cause(2);
    assert_eq!(retry, Cause::ClientRetry, "{why}");
    assert!(why.contains("billing@web-3:101 asked again"), "{why}");
    let (rerun, why, _) = cause(3);
    assert_eq!(rerun, Cause::Rerun, "{why}");
    assert!(
        why.contains("billing@web-3:101 ran again as ops@laptop:7"),
        "{why}"
    );
}

#[test]
fn two_named_clients_at_once_are_an_overlap_not_a_client_retry() {
    let log = vec![
        by_caller(entry(1, 1, 1, AttemptEvent::Executed, None, 10), "a@h:1"),
        by_caller(entry(2, 1, 1, AttemptEvent::InProgress, None, 20), "b@h:2"),
        by_caller(entry(3, 1, 1, AttemptEvent::Completed, None, 30), "a@h:1"),
    ];
    let found = analyse(&log);
    assert_eq!(found.causes(), vec![(Cause::Overlap, 1)]);
}

#[test]
fn a_caller_named_like_a_process_is_not_that_process() {
    // A client named `web-3:4242` and the process 4242 on `web-3` read
    // alike; they are two callers, at once.
    let process = |mut e: AttemptEntry| {
        e.holder = Some(Holder {
            host: "web-3".into(),
            pid: 4242,
            ..Holder::default()
        });
        e
    };
    let log = vec![
        by_caller(
            entry(1, 1, 1, AttemptEvent::Executed, None, 10),
            "web-3:4242",
        ),
        process(entry(2, 1, 1, AttemptEvent::InProgress, None, 20)),
        by_caller(
            entry(3, 1, 1, AttemptEvent::Completed, None, 30),
            "web-3:4242",
        ),
    ];
    let found = analyse(&log);
    assert_eq!(found.runs.len(), 2, "{:?}", found.runs);
    assert_eq!(found.causes(), vec![(Cause::Overlap, 1)]);
    assert_eq!(found.duplicates[0].runs, vec!["web-3:4242", "web-3:4242"]);
}
