use idem_store::Holder;

use super::*;

fn entry(
    id: u64,
    key: u8,
    fence: u64,
    event: AttemptEvent,
    run: Option<(&str, &str)>,
    at: u64,
) -> AttemptEntry {
    AttemptEntry {
        id,
        key: RecordKey::new("ns", Digest([key; 32])),
        fence,
        event,
        holder: run.map(|(run, trigger)| Holder {
            run_id: (!run.is_empty()).then(|| run.to_string()),
            trigger: Some(trigger.to_string()),
            attempt: Some(1),
            host: "h".into(),
            pid: 1,
            token: None,
        }),
        at_ms: at,
        policy_digest: Some("sha256:p".into()),
        operation_digest: Some(Digest([key; 32])),
        actor: None,
        detail: None,
    }
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
