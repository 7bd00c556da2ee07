//! A person's resolution of a record waiting for review: only of such a
//! record, under a new fence, conditional on the fence the person saw, and
//! logged with who and why.

use std::future::Future;

use super::Fixture;
use super::assert::{
    assert_fenced, assert_not_eligible, claimed, fixture, holder, key, ms, request, resolution,
    view,
};
use super::attempt_log::{events_of, log_of};
use idem_store::{
    AttemptEvent, Outcome, RecordState, Resolution, ResolveRequest, StoreError, StoreOptions,
};

/// A person's resolution: only of a record waiting for review, under a
/// new fence (a late write of the deposed holder is then refused and
/// logged), conditional on the fence the person saw, logged with who and
/// why; completed, released (a take-over may follow) or rejected
/// (final). A refused resolution changes nothing and logs nothing.
pub async fn resolution_settles_review_once<F, Fut>(factory: &F)
where
    F: Fn(StoreOptions) -> Fut,
    Fut: Future<Output = Fixture>,
{
    let (fx, clock) = fixture(factory, 16).await;
    let store = &fx.store;
    let name = store.describe();

    // In progress with a live lease: not waiting for review.
    let a = claimed(store, request(&key(1), 1, 1_000, 60_000, 1)).await;
    let done = Resolution::Completed(Outcome::new(0, "receipt"));
    assert_not_eligible(
        store
            .records()
            .resolve(resolution(&key(1), a.fence, done.clone()))
            .await,
        RecordState::InProgress,
    );
    // Past its lease: it is. Bad requests are refused first.
    clock.advance(ms(1_000));
    for bad in [
        ResolveRequest {
            reason: "  ".into(),
            ..resolution(&key(1), a.fence, done.clone())
        },
        ResolveRequest {
            by: String::new(),
            ..resolution(&key(1), a.fence, done.clone())
        },
        // A reason past what the log keeps is refused, not cut short.
        ResolveRequest {
            reason: "r".repeat(idem_store::MAX_NOTE_BYTES + 1),
            ..resolution(&key(1), a.fence, done.clone())
        },
        resolution(
            &key(1),
            a.fence,
            Resolution::Completed(Outcome::new(0, vec![0; 17])),
        ),
    ] {
        let refused = store.records().resolve(bad).await;
        assert!(
            matches!(
                refused,
                Err(StoreError::InvalidRequest(_) | StoreError::OutcomeTooLarge { .. })
            ),
            "{name}: {refused:?}"
        );
    }
    // The fence the person saw must still be the record's.
    assert_fenced(
        store
            .records()
            .resolve(resolution(&key(1), a.fence + 1_000, done.clone()))
            .await,
        a.fence + 1_000,
        a.fence,
    );
    assert_eq!(events_of(store, &key(1)).await.len(), 1, "{name}");

    let resolved = store
        .records()
        .resolve(resolution(&key(1), a.fence, done.clone()))
        .await
        .expect("resolve");
    let record = &resolved.record;
    assert_eq!(record.state, RecordState::Completed, "{name}");
    assert!(record.fence > a.fence, "{name}: a new fence");
    assert_eq!(record.outcome, Some(Outcome::new(0, "receipt")), "{name}");
    assert_eq!(record.holder.host, "ops-host", "{name}");
    assert_eq!(view(store, &key(1)).await.record, *record, "{name}");
    // The paused holder wakes: refused, logged. A second resolution: the
    // record no longer waits.
    assert_fenced(
        store
            .writes()
            .complete(&key(1), a.fence, Outcome::new(0, "late"))
            .await,
        a.fence,
        record.fence,
    );
    assert_not_eligible(
        store
            .records()
            .resolve(resolution(&key(1), record.fence, Resolution::Release))
            .await,
        RecordState::Completed,
    );
    let entries = log_of(store, &key(1)).await;
    let seen: Vec<_> = entries.iter().map(|e| (e.event, e.fence)).collect();
    assert_eq!(
        seen,
        vec![
            (AttemptEvent::Executed, a.fence),
            (AttemptEvent::ResolvedCompleted, record.fence),
            (AttemptEvent::Fenced, a.fence),
        ],
        "{name}"
    );
    assert_eq!(entries[1].actor.as_deref(), Some("alice"), "{name}");
    assert_eq!(
        entries[1].detail.as_deref(),
        Some("checked the provider: charge ch_1 exists"),
        "{name}"
    );
    assert_eq!(entries[1].holder.as_ref().map(|h| h.pid), Some(7), "{name}");

    // Released (from outcome-unknown): the next claim may take over.
    let b = claimed(store, request(&key(2), 1, 1_000, 60_000, 1)).await;
    clock.advance(ms(1_000));
    store
        .records()
        .mark_unknown(&key(2), b.fence)
        .await
        .expect("mark");
    let released = store
        .records()
        .resolve(resolution(&key(2), b.fence, Resolution::Release))
        .await
        .expect("release");
    assert_eq!(released.record.state, RecordState::FailedRetryable);
    let error = released.record.outcome.and_then(|o| o.error);
    assert!(
        error.as_deref().is_some_and(|e| e.contains("alice")),
        "{name}: {error:?}"
    );
    let again = store
        .records()
        .take_over(&key(2), released.record.fence, ms(1_000), holder(2), None)
        .await
        .expect("take over after a release");
    assert!(again.fence > released.record.fence);

    // Rejected: final, with the status given.
    let c = claimed(store, request(&key(3), 1, 1_000, 60_000, 1)).await;
    clock.advance(ms(1_000));
    let rejected = store
        .records()
        .resolve(resolution(
            &key(3),
            c.fence,
            Resolution::Reject { status: 409 },
        ))
        .await
        .expect("reject");
    assert_eq!(rejected.record.state, RecordState::FailedPermanent);
    assert_eq!(rejected.record.outcome.map(|o| o.status), Some(409));
    assert_not_eligible(
        store
            .records()
            .take_over(&key(3), rejected.record.fence, ms(1_000), holder(2), None)
            .await,
        RecordState::FailedPermanent,
    );
    assert_eq!(
        events_of(store, &key(3)).await,
        vec![
            (AttemptEvent::Executed, c.fence),
            (AttemptEvent::ResolvedRejected, rejected.record.fence),
        ],
        "{name}"
    );
}
