//! The attempt log: what each change logs, in the same transaction;
//! answers appended; filters; gc; a log switched off. A person's resolution
//! is in `resolution.rs`.

use std::future::Future;

use super::Fixture;
use super::assert::resolution;
use super::assert::{
    START_MS, assert_fenced, claimed, existing, fixture, holder, key, ms, request, view,
};
use idem_store::{
    AttemptEntry, AttemptEvent, AttemptFilter, Digest, Ending, Finish, Outcome, RecordKey,
    RecordState, Resolution, Store, StoreError, StoreOptions,
};

async fn log(store: &Store, filter: AttemptFilter) -> Vec<AttemptEntry> {
    store
        .records()
        .attempts(filter)
        .await
        .expect("reading the attempt log")
}

pub(super) async fn log_of(store: &Store, key: &RecordKey) -> Vec<AttemptEntry> {
    log(
        store,
        AttemptFilter {
            key: Some(key.clone()),
            ..AttemptFilter::default()
        },
    )
    .await
}

/// The events of `key`'s entries, oldest first.
pub(super) async fn events_of(store: &Store, key: &RecordKey) -> Vec<(AttemptEvent, u64)> {
    log_of(store, key)
        .await
        .into_iter()
        .map(|e| (e.event, e.fence))
        .collect()
}

fn answer(key: &RecordKey, fence: u64, event: AttemptEvent, who: u32, at: u64) -> AttemptEntry {
    AttemptEntry::answer(
        key.clone(),
        fence,
        event,
        holder(who),
        at,
        super::POLICY.to_string(),
        Some(Digest::of_bytes(&key.digest.0)),
        Some("a reason".into()),
    )
}

/// Every record change appends its entry in the same transaction, on the
/// single and the batch paths alike: a fresh claim (`executed`, with the
/// claimer, the policy and the operation digest), an end (with the
/// holder of its fence), a take-over, a mark-unknown, and a refused late
/// write (`fenced`, naming only its fence); a claim that found a record
/// logs nothing (its answer is the caller's to log, with
/// [`Records::log_answers`](idem_store::Records::log_answers), at the time the caller gives). Ids increase in
/// commit order; the filters select by key, namespace, time and id.
pub async fn attempt_log_follows_every_change<F, Fut>(factory: &F)
where
    F: Fn(StoreOptions) -> Fut,
    Fut: Future<Output = Fixture>,
{
    let (fx, clock) = fixture(factory, idem_store::DEFAULT_MAX_OUTCOME_BYTES).await;
    let store = &fx.store;
    let name = store.describe();

    // A fresh claim and its completion.
    let a = claimed(store, request(&key(1), 1, 1_000, 60_000, 1)).await;
    clock.advance(ms(5));
    store
        .writes()
        .complete(&key(1), a.fence, Outcome::new(0, "ok"))
        .await
        .expect("complete");
    let entries = log_of(store, &key(1)).await;
    assert_eq!(entries.len(), 2, "{name}: {entries:?}");
    let executed = &entries[0];
    assert_eq!(executed.event, AttemptEvent::Executed, "{name}");
    assert_eq!(executed.fence, a.fence);
    assert_eq!(executed.holder.as_ref(), Some(&holder(1)), "{name}");
    assert_eq!(executed.at_ms, START_MS, "{name}: the store clock");
    assert_eq!(executed.policy_digest.as_deref(), Some(super::POLICY));
    assert_eq!(
        executed.operation_digest,
        Some(Digest::of_bytes(&key(1).digest.0)),
        "{name}"
    );
    let completed = &entries[1];
    assert_eq!(
        (completed.event, completed.fence, completed.at_ms),
        (AttemptEvent::Completed, a.fence, START_MS + 5),
        "{name}"
    );
    assert_eq!(completed.holder.as_ref(), Some(&holder(1)), "{name}");
    assert!(completed.id > executed.id, "{name}: ids grow");

    // A duplicate's claim logs nothing; its answer is appended.
    existing(store, request(&key(1), 1, 1_000, 60_000, 2)).await;
    assert_eq!(log_of(store, &key(1)).await.len(), 2, "{name}");
    clock.advance(ms(5));
    store
        .records()
        .log_answers(vec![answer(
            &key(1),
            a.fence,
            AttemptEvent::Replayed,
            2,
            clock.now_ms() - 1,
        )])
        .await
        .expect("log an answer");
    let replayed = log_of(store, &key(1)).await.pop().expect("an entry");
    assert_eq!(
        (replayed.event, replayed.fence, replayed.at_ms),
        (AttemptEvent::Replayed, a.fence, START_MS + 9),
        "{name}"
    );
    assert_eq!(replayed.holder.as_ref(), Some(&holder(2)), "{name}");
    assert_eq!(replayed.detail.as_deref(), Some("a reason"), "{name}");
    // Only answers are appended this way.
    let refused = store
        .records()
        .log_answers(vec![
            answer(&key(1), a.fence, AttemptEvent::Replayed, 2, START_MS),
            answer(&key(1), a.fence, AttemptEvent::Completed, 2, START_MS),
        ])
        .await;
    assert!(
        matches!(refused, Err(StoreError::InvalidRequest(_))),
        "{name}: {refused:?}"
    );
    assert_eq!(log_of(store, &key(1)).await.len(), 3, "{name}: nothing");

    // A take-over after the lease expired; the deposed holder's late
    // heartbeat and completion are refused and logged, once however often
    // it retries them.
    let b = claimed(store, request(&key(2), 1, 1_000, 60_000, 1)).await;
    clock.advance(ms(1_000));
    let c = store
        .records()
        .take_over(&key(2), b.fence, ms(1_000), holder(3), None)
        .await
        .expect("take over");
    // A fence never handed out is refused too, but is no deposed holder:
    // not logged (else any caller could grow the log without end).
    let (never, retries) = ([c.fence + 1, c.fence + 1_000], 4);
    for fence in std::iter::repeat_n(b.fence, retries).chain(never) {
        assert_fenced(
            store.records().heartbeat(&key(2), fence, ms(1_000)).await,
            fence,
            c.fence,
        );
        assert_fenced(
            store
                .writes()
                .complete(&key(2), fence, Outcome::new(0, "late"))
                .await,
            fence,
            c.fence,
        );
    }
    store
        .writes()
        .fail(&key(2), c.fence, true, Outcome::error(75, "try later"))
        .await
        .expect("fail");
    assert_eq!(
        events_of(store, &key(2)).await,
        vec![
            (AttemptEvent::Executed, b.fence),
            (AttemptEvent::TakenOver, c.fence),
            (AttemptEvent::Fenced, b.fence),
            (AttemptEvent::Fenced, b.fence),
            (AttemptEvent::FailedRetryable, c.fence),
        ],
        "{name}"
    );
    let entries = log_of(store, &key(2)).await;
    assert_eq!(entries[1].holder.as_ref(), Some(&holder(3)), "{name}");
    assert_eq!(
        entries[2].holder, None,
        "{name}: a refused write names its fence"
    );
    assert!(
        entries[3]
            .detail
            .as_deref()
            .is_some_and(|d| d.contains(&c.fence.to_string())),
        "{name}: {:?}",
        entries[3].detail
    );

    // Sent to review, then a permanent failure on another key.
    let d = claimed(store, request(&key(3), 1, 1_000, 60_000, 1)).await;
    clock.advance(ms(1_000));
    store
        .records()
        .mark_unknown(&key(3), d.fence)
        .await
        .expect("mark");
    // Marking again changes nothing and logs nothing; the holder's late
    // completion is refused and logged (it was deposed by the review).
    store
        .records()
        .mark_unknown(&key(3), d.fence)
        .await
        .expect("mark");
    let late = store
        .writes()
        .complete(&key(3), d.fence, Outcome::new(0, "late"))
        .await;
    assert!(
        matches!(late, Err(StoreError::NotInProgress { .. })),
        "{name}: {late:?}"
    );
    assert_eq!(
        events_of(store, &key(3)).await,
        vec![
            (AttemptEvent::Executed, d.fence),
            (AttemptEvent::MarkedUnknown, d.fence),
            (AttemptEvent::Fenced, d.fence),
        ],
        "{name}"
    );

    // The batch paths log what the single ones do.
    clock.advance(ms(1));
    let since = clock.now_ms();
    let batch = store
        .writes()
        .claim_many(vec![
            request(&key(4), 1, 1_000, 60_000, 4),
            request(&key(5), 1, 1_000, 60_000, 4),
            request(&key(1), 1, 1_000, 60_000, 4),
        ])
        .await
        .expect("claim a batch");
    let fences: Vec<u64> = batch[..2]
        .iter()
        .map(|r| match r {
            Ok(idem_store::ClaimOutcome::Claimed(c)) => c.fence,
            other => panic!("{name}: expected a claim, got {other:?}"),
        })
        .collect();
    let finished = store
        .writes()
        .finish_many(vec![
            Finish {
                key: key(4),
                fence: fences[0],
                ending: Ending::Completed,
                outcome: Outcome::new(0, "4"),
            },
            Finish {
                key: key(5),
                fence: fences[1],
                ending: Ending::Failed { retryable: false },
                outcome: Outcome::error(2, "no"),
            },
        ])
        .await
        .expect("finish a batch");
    assert!(finished.iter().all(Result::is_ok), "{name}: {finished:?}");
    for (k, fence, end) in [
        (key(4), fences[0], AttemptEvent::Completed),
        (key(5), fences[1], AttemptEvent::FailedPermanent),
    ] {
        let entries = log_of(store, &k).await;
        let seen: Vec<_> = entries.iter().map(|e| (e.event, e.fence)).collect();
        assert_eq!(
            seen,
            vec![(AttemptEvent::Executed, fence), (end, fence)],
            "{name}: {k}"
        );
        assert_eq!(entries[0].holder.as_ref(), Some(&holder(4)), "{name}");
        assert_eq!(entries[1].holder.as_ref(), Some(&holder(4)), "{name}");
        assert_eq!(
            entries[0].operation_digest,
            Some(Digest::of_bytes(&k.digest.0)),
            "{name}"
        );
    }

    // Filters: time, namespace, id, limit.
    let recent = log(
        store,
        AttemptFilter {
            since_ms: Some(since),
            ..AttemptFilter::default()
        },
    )
    .await;
    assert_eq!(recent.len(), 4, "{name}: {recent:?}");
    let all = log(store, AttemptFilter::default()).await;
    assert!(
        all.windows(2).all(|w| w[0].id < w[1].id),
        "{name}: id order"
    );
    let before = log(
        store,
        AttemptFilter {
            until_ms: Some(since),
            ..AttemptFilter::default()
        },
    )
    .await;
    assert_eq!(before.len() + recent.len(), all.len(), "{name}");
    let page = log(
        store,
        AttemptFilter {
            after_id: Some(all[2].id),
            limit: Some(3),
            ..AttemptFilter::default()
        },
    )
    .await;
    assert_eq!(page, all[3..6].to_vec(), "{name}");
    let elsewhere = log(
        store,
        AttemptFilter {
            namespace: Some("elsewhere".into()),
            ..AttemptFilter::default()
        },
    )
    .await;
    assert!(elsewhere.is_empty(), "{name}");
    let here = log(
        store,
        AttemptFilter {
            namespace: Some(key(1).namespace),
            ..AttemptFilter::default()
        },
    )
    .await;
    assert_eq!(here, all, "{name}");

    // One key's timeline (a statement of its own on the SQL stores), with
    // the other filters on it.
    let k = key(1);
    let mine: Vec<_> = all.iter().filter(|e| e.key == k).cloned().collect();
    assert!(mine.len() >= 2, "{name}: {mine:?}");
    let by_key = |f: AttemptFilter| {
        log(
            store,
            AttemptFilter {
                key: Some(k.clone()),
                ..f
            },
        )
    };
    assert_eq!(by_key(AttemptFilter::default()).await, mine, "{name}");
    assert_eq!(
        by_key(AttemptFilter {
            namespace: Some(k.namespace.clone()),
            after_id: Some(mine[0].id),
            limit: Some(1),
            ..AttemptFilter::default()
        })
        .await,
        mine[1..2].to_vec(),
        "{name}"
    );
    let expected: Vec<_> = mine.iter().filter(|e| e.at_ms >= since).cloned().collect();
    let since_filter = AttemptFilter {
        since_ms: Some(since),
        ..AttemptFilter::default()
    };
    assert_eq!(by_key(since_filter).await, expected, "{name}");
    let mismatched = AttemptFilter {
        namespace: Some("elsewhere".into()),
        ..AttemptFilter::default()
    };
    assert!(by_key(mismatched).await.is_empty(), "{name}");
}

/// `gc` removes a collected record's entries with it, and only those; a
/// record that replaced an expired one keeps the earlier one's entries in
/// its timeline until it is collected itself; an answer about a record
/// already collected is not logged.
pub async fn gc_removes_attempt_entries_with_their_records<F, Fut>(factory: &F)
where
    F: Fn(StoreOptions) -> Fut,
    Fut: Future<Output = Fixture>,
{
    let (fx, clock) = fixture(factory, idem_store::DEFAULT_MAX_OUTCOME_BYTES).await;
    let store = &fx.store;
    let name = store.describe();
    let completed = |k: RecordKey, fence: u64| async move {
        store
            .writes()
            .complete(&k, fence, Outcome::new(0, "done"))
            .await
            .expect("complete");
    };
    let short = claimed(store, request(&key(1), 1, 100, 1_000, 1)).await;
    completed(key(1), short.fence).await;
    let long = claimed(store, request(&key(2), 1, 100, 60_000, 1)).await;
    completed(key(2), long.fence).await;
    let first = claimed(store, request(&key(3), 1, 100, 1_000, 1)).await;
    completed(key(3), first.fence).await;
    clock.advance(ms(2_000));
    // Expired, not yet collected: a fresh claim replaces it.
    let second = claimed(store, request(&key(3), 1, 100, 1_000, 2)).await;
    assert_eq!(store.records().gc().await.expect("gc"), 1, "{name}");
    assert!(log_of(store, &key(1)).await.is_empty(), "{name}");
    assert_eq!(log_of(store, &key(2)).await.len(), 2, "{name}");
    assert_eq!(
        events_of(store, &key(3)).await,
        vec![
            (AttemptEvent::Executed, first.fence),
            (AttemptEvent::Completed, first.fence),
            (AttemptEvent::Executed, second.fence),
        ],
        "{name}: both records' entries"
    );

    // An answer given about key 1 before it was collected, logged after.
    store
        .records()
        .log_answers(vec![answer(
            &key(1),
            short.fence,
            AttemptEvent::Replayed,
            2,
            START_MS + 500,
        )])
        .await
        .expect("log an answer");
    let everything = log(store, AttemptFilter::default()).await;
    assert!(
        everything.iter().all(|e| e.key != key(1)),
        "{name}: {everything:?}"
    );

    // The replacing record collected: the earlier one's entries with it.
    completed(key(3), second.fence).await;
    clock.advance(ms(2_000));
    assert_eq!(store.records().gc().await.expect("gc"), 1, "{name}");
    let left: Vec<RecordKey> = log(store, AttemptFilter::default())
        .await
        .into_iter()
        .map(|e| e.key)
        .collect();
    assert_eq!(left, vec![key(2), key(2)], "{name}");
}

/// With the attempt log off (`StoreOptions::attempt_log`), every path
/// works as before and writes no entry: the fast paths, the batches, a
/// refused late write, a resolution, answers.
pub async fn attempt_log_off_writes_no_entries<F, Fut>(factory: &F)
where
    F: Fn(StoreOptions) -> Fut,
    Fut: Future<Output = Fixture>,
{
    let clock = idem_store::ManualClock::new(START_MS);
    let fx = factory(StoreOptions {
        clock: clock.store_clock(),
        attempt_log: false,
        ..StoreOptions::default()
    })
    .await;
    let store = &fx.store;
    let name = store.describe();
    let a = claimed(store, request(&key(1), 1, 1_000, 60_000, 1)).await;
    store
        .writes()
        .complete(&key(1), a.fence, Outcome::new(0, "ok"))
        .await
        .expect("complete");
    let batch = store
        .writes()
        .claim_many(vec![
            request(&key(2), 1, 1_000, 60_000, 1),
            request(&key(3), 1, 1_000, 60_000, 1),
        ])
        .await
        .expect("claim a batch");
    let fences: Vec<u64> = batch
        .iter()
        .map(|r| match r {
            Ok(idem_store::ClaimOutcome::Claimed(c)) => c.fence,
            other => panic!("{name}: {other:?}"),
        })
        .collect();
    let finished = store
        .writes()
        .finish_many(vec![
            Finish {
                key: key(2),
                fence: fences[0],
                ending: Ending::Completed,
                outcome: Outcome::new(0, "2"),
            },
            Finish {
                key: key(3),
                fence: fences[1],
                ending: Ending::Completed,
                outcome: Outcome::new(0, "3"),
            },
        ])
        .await
        .expect("finish a batch");
    assert!(finished.iter().all(Result::is_ok), "{name}: {finished:?}");
    let b = claimed(store, request(&key(4), 1, 1_000, 60_000, 1)).await;
    clock.advance(ms(1_000));
    let c = store
        .records()
        .take_over(&key(4), b.fence, ms(1_000), holder(2), None)
        .await
        .expect("take over");
    assert_fenced(
        store
            .writes()
            .complete(&key(4), b.fence, Outcome::new(0, "late"))
            .await,
        b.fence,
        c.fence,
    );
    clock.advance(ms(1_000));
    let released = store
        .records()
        .resolve(resolution(&key(4), c.fence, Resolution::Release))
        .await
        .expect("resolve");
    // Without the log a person's release cannot be told from a holder's
    // end: an amendment is refused, saying so (not blaming a holder).
    match store
        .records()
        .amend(resolution(
            &key(4),
            released.record.fence,
            Resolution::Reject { status: 1 },
        ))
        .await
    {
        Err(StoreError::NotEligible { why, .. }) => {
            assert!(why.contains("keeps no attempt log"), "{name}: {why}")
        }
        other => panic!("{name}: an amendment without the log: {other:?}"),
    }
    store
        .records()
        .log_answers(vec![answer(
            &key(1),
            a.fence,
            AttemptEvent::Replayed,
            2,
            START_MS,
        )])
        .await
        .expect("answers");
    assert_eq!(
        log(store, AttemptFilter::default()).await,
        vec![],
        "{name}: the log is off"
    );
    assert_eq!(
        view(store, &key(3)).await.record.state,
        RecordState::Completed
    );
}
