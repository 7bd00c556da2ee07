//! A person's resolution that was wrong, amended by a person: only a
//! release or a rejection a person wrote (never a completed record, never a
//! holder's end, never a record still waiting for review), conditional on
//! the fence the person saw, and logged beside the decision it amends.

use std::future::Future;

use super::Fixture;
use super::assert::{
    assert_fenced, assert_not_eligible, claimed, fixture, holder, key, ms, request, resolution,
    view,
};
use super::attempt_log::{events_of, log_of};
use idem_store::{AttemptEvent, Outcome, RecordState, Resolution, StoreOptions};

/// A rejection made by mistake becomes a completion (the charge was in
/// fact made): under a new fence, logged as a resolution whose detail names
/// the rejection it amends, with the rejection still in the log; later
/// reads see the completion. A stale amendment (a colleague's page showing
/// the rejection's fence), a second amendment of a completion, an
/// amendment of a holder's own failure, of a record waiting for review and
/// of a release a claim has since taken are refused, changing nothing.
pub async fn a_persons_resolution_is_amended_once<F, Fut>(factory: &F)
where
    F: Fn(StoreOptions) -> Fut,
    Fut: Future<Output = Fixture>,
{
    let (fx, clock) = fixture(factory, 64).await;
    let store = &fx.store;
    let name = store.describe();
    let done = Resolution::Completed(Outcome::new(0, "receipt ch_1"));

    // Key 1: rejected by a person, then amended to completed.
    let a = claimed(store, request(&key(1), 1, 1_000, 60_000, 1)).await;
    clock.advance(ms(1_000));
    let rejected = store
        .records()
        .resolve(resolution(
            &key(1),
            a.fence,
            Resolution::Reject { status: 1 },
        ))
        .await
        .expect("reject");
    let r = rejected.record.fence;
    // A page that still shows the claim's fence is stale.
    assert_fenced(
        store
            .records()
            .amend(resolution(&key(1), a.fence, done.clone()))
            .await,
        a.fence,
        r,
    );
    let amended = store
        .records()
        .amend(resolution(&key(1), r, done.clone()))
        .await
        .expect("amend");
    let record = &amended.record;
    assert_eq!(record.state, RecordState::Completed, "{name}");
    assert!(record.fence > r, "{name}: a new fence");
    assert_eq!(
        record.outcome,
        Some(Outcome::new(0, "receipt ch_1")),
        "{name}"
    );
    assert_eq!(view(store, &key(1)).await.record, *record, "{name}");
    // A colleague's amendment from the rejection's page: stale. And a
    // completion is never amended.
    assert_fenced(
        store
            .records()
            .amend(resolution(&key(1), r, Resolution::Release))
            .await,
        r,
        record.fence,
    );
    assert_not_eligible(
        store
            .records()
            .amend(resolution(&key(1), record.fence, Resolution::Release))
            .await,
        RecordState::Completed,
    );
    let entries = log_of(store, &key(1)).await;
    let seen: Vec<_> = entries.iter().map(|e| (e.event, e.fence)).collect();
    assert_eq!(
        seen,
        vec![
            (AttemptEvent::Executed, a.fence),
            (AttemptEvent::ResolvedRejected, r),
            (AttemptEvent::ResolvedCompleted, record.fence),
        ],
        "{name}: both decisions kept"
    );
    assert_eq!(entries[2].actor.as_deref(), Some("alice"), "{name}");
    let detail = entries[2].detail.as_deref().unwrap_or_default();
    assert_eq!(
        detail,
        format!(
            "{}resolved-rejected at fence {r}: checked the provider: charge ch_1 exists",
            idem_store::AMENDS
        ),
        "{name}"
    );

    // Key 2: a holder's own permanent failure is not a person's to amend.
    let b = claimed(store, request(&key(2), 1, 1_000, 60_000, 1)).await;
    store
        .writes()
        .fail(&key(2), b.fence, false, Outcome::error(1, "card declined"))
        .await
        .expect("fail");
    assert_not_eligible(
        store
            .records()
            .amend(resolution(&key(2), b.fence, done.clone()))
            .await,
        RecordState::FailedPermanent,
    );

    // Key 3: waiting for review (past its lease): settle it, not amend.
    let c = claimed(store, request(&key(3), 1, 1_000, 60_000, 1)).await;
    clock.advance(ms(1_000));
    assert_not_eligible(
        store
            .records()
            .amend(resolution(&key(3), c.fence, done.clone()))
            .await,
        RecordState::InProgress,
    );

    // Key 4: released, then taken by a claim: the release is history.
    let d = claimed(store, request(&key(4), 1, 1_000, 60_000, 1)).await;
    clock.advance(ms(1_000));
    let released = store
        .records()
        .resolve(resolution(&key(4), d.fence, Resolution::Release))
        .await
        .expect("release");
    let again = store
        .records()
        .take_over(&key(4), released.record.fence, ms(1_000), holder(2), None)
        .await
        .expect("take over after a release");
    assert_fenced(
        store
            .records()
            .amend(resolution(&key(4), released.record.fence, done.clone()))
            .await,
        released.record.fence,
        again.fence,
    );

    // Nothing refused wrote anything.
    assert_eq!(events_of(store, &key(2)).await.len(), 2, "{name}");
    assert_eq!(events_of(store, &key(3)).await.len(), 1, "{name}");
    assert_eq!(events_of(store, &key(4)).await.len(), 3, "{name}");
}
