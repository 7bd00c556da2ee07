//! Checks on one record's life: claims and duplicates, completion and
//! replay, fencing, leases and take-overs, heartbeats, failures and
//! mark-unknown.

use std::future::Future;

use super::Fixture;
use super::assert::{
    POLICY, START_MS, assert_fenced, assert_gone, assert_not_eligible, assert_not_in_progress,
    claimed, existing, fingerprint, fixture, holder, key, ms, request, view,
};
use idem_store::{Outcome, RecordKey, RecordState, StoreError, StoreOptions};

/// A claim inserts an in-progress record under a fresh fence; a duplicate
/// sees it, with store-clock age and lease and whether its fingerprint
/// matches; namespaces never collide.
pub async fn claim_and_duplicate<F, Fut>(factory: &F)
where
    F: Fn(StoreOptions) -> Fut,
    Fut: Future<Output = Fixture>,
{
    let (fx, clock) = fixture(factory, idem_store::DEFAULT_MAX_OUTCOME_BYTES).await;
    let store = &fx.store;
    let k = key(1);
    assert_eq!(store.records().get(&k).await.expect("get"), None);
    let claim = claimed(store, request(&k, 1, 5_000, 60_000, 1)).await;
    assert_eq!(claim.key, k);
    assert!(claim.fence > 0);
    assert_eq!(claim.attempt, 1);
    assert_eq!(claim.lease_until_ms, START_MS + 5_000);

    let v = view(store, &k).await;
    let r = &v.record;
    assert_eq!(r.state, RecordState::InProgress);
    assert_eq!(
        (r.fence, r.attempts, r.created_ms, r.updated_ms),
        (claim.fence, 1, START_MS, START_MS)
    );
    assert_eq!(
        (r.policy_digest.as_str(), r.partition.as_str()),
        (POLICY, "customer-1")
    );
    assert_eq!(r.fingerprint, fingerprint(1));
    assert_eq!(r.holder, holder(1));
    assert_eq!(r.outcome, None);
    assert!(r.retain_until_ms >= START_MS + 60_000);

    clock.advance(ms(1_200));
    let dup = existing(store, request(&k, 1, 5_000, 60_000, 2)).await;
    assert!(dup.fingerprint_matches);
    assert_eq!(dup.view.record.fence, claim.fence);
    assert_eq!(
        dup.view.record.holder,
        holder(1),
        "a duplicate does not change the holder"
    );
    assert_eq!(
        (dup.view.age_ms, dup.view.lease_remaining_ms),
        (1_200, 3_800)
    );
    assert_eq!(dup.view.now_ms, START_MS + 1_200);

    let other = existing(store, request(&k, 2, 5_000, 60_000, 3)).await;
    assert!(!other.fingerprint_matches);
    let ctx = other.duplicate_context(
        idem_core::Operation::from_json(
            r#"{"kind":"k","tenant":"t"}"#,
            &idem_core::OperationLimits::default(),
        )
        .expect("an operation"),
    );
    assert_eq!(
        (ctx.state, ctx.fingerprint_matches, ctx.attempts),
        (RecordState::InProgress, false, 1)
    );

    // The same digest in another namespace is another record.
    let elsewhere = RecordKey::new("other-namespace", k.digest);
    let second = claimed(store, request(&elsewhere, 1, 5_000, 60_000, 4)).await;
    assert!(second.fence > claim.fence);
    assert_eq!(view(store, &k).await.record.fence, claim.fence);

    let mut bad = request(&key(2), 1, 5_000, 60_000, 1);
    bad.policy_digest = "md5:abc".to_string();
    assert!(matches!(
        store.writes().claim(bad).await,
        Err(StoreError::InvalidRequest(_))
    ));
    assert_eq!(store.records().get(&key(2)).await.expect("get"), None);
}

/// A completed record is final: replayed to duplicates, never overwritten,
/// not even by its own fence.
pub async fn complete_then_replay<F, Fut>(factory: &F)
where
    F: Fn(StoreOptions) -> Fut,
    Fut: Future<Output = Fixture>,
{
    let (fx, clock) = fixture(factory, idem_store::DEFAULT_MAX_OUTCOME_BYTES).await;
    let store = &fx.store;
    let k = key(1);
    let claim = claimed(store, request(&k, 1, 5_000, 60_000, 1)).await;
    clock.advance(ms(300));
    store
        .writes()
        .complete(&k, claim.fence, Outcome::new(201, b"charged".to_vec()))
        .await
        .expect("complete");

    let dup = existing(store, request(&k, 1, 5_000, 60_000, 2)).await;
    let r = &dup.view.record;
    assert_eq!(r.state, RecordState::Completed);
    assert_eq!(r.outcome, Some(Outcome::new(201, b"charged".to_vec())));
    assert_eq!(r.updated_ms, START_MS + 300);
    assert_eq!(
        dup.view.lease_remaining_ms, 0,
        "a completed record has no lease"
    );
    assert!(dup.fingerprint_matches);
    let summary = r
        .outcome
        .as_ref()
        .map(Outcome::summary)
        .expect("an outcome");
    assert_eq!((summary.status, summary.size), (201, 7));

    let before = view(store, &k).await.record;
    assert_not_in_progress(
        store
            .writes()
            .complete(&k, claim.fence, Outcome::new(500, b"again".to_vec()))
            .await,
        RecordState::Completed,
    );
    assert_not_in_progress(
        store
            .writes()
            .fail(&k, claim.fence, true, Outcome::error(1, "late"))
            .await,
        RecordState::Completed,
    );
    assert_not_in_progress(
        store.records().heartbeat(&k, claim.fence, ms(5_000)).await,
        RecordState::Completed,
    );
    assert_fenced(
        store
            .writes()
            .complete(&k, claim.fence + 1000, Outcome::new(500, Vec::new()))
            .await,
        claim.fence + 1000,
        claim.fence,
    );
    assert_eq!(
        view(store, &k).await.record,
        before,
        "a completed record never changes"
    );
}

/// A deposed holder's writes are fenced and change nothing.
pub async fn fenced_stale_writes<F, Fut>(factory: &F)
where
    F: Fn(StoreOptions) -> Fut,
    Fut: Future<Output = Fixture>,
{
    let (fx, clock) = fixture(factory, idem_store::DEFAULT_MAX_OUTCOME_BYTES).await;
    let store = &fx.store;
    let k = key(1);
    let a = claimed(store, request(&k, 1, 1_000, 60_000, 1)).await;
    clock.advance(ms(1_000));
    let b = store
        .records()
        .take_over(&k, a.fence, ms(1_000), holder(2), None)
        .await
        .expect("take over an expired lease");
    assert!(b.fence > a.fence);

    let before = view(store, &k).await.record;
    assert_fenced(
        store
            .writes()
            .complete(&k, a.fence, Outcome::new(200, b"stale".to_vec()))
            .await,
        a.fence,
        b.fence,
    );
    assert_fenced(
        store
            .writes()
            .fail(&k, a.fence, false, Outcome::error(1, "stale"))
            .await,
        a.fence,
        b.fence,
    );
    assert_fenced(
        store.records().heartbeat(&k, a.fence, ms(60_000)).await,
        a.fence,
        b.fence,
    );
    assert_fenced(
        store
            .records()
            .take_over(&k, a.fence, ms(1_000), holder(3), None)
            .await,
        a.fence,
        b.fence,
    );
    assert_fenced(
        store.records().mark_unknown(&k, a.fence).await,
        a.fence,
        b.fence,
    );
    assert_eq!(
        view(store, &k).await.record,
        before,
        "fenced writes change nothing"
    );

    store
        .writes()
        .complete(&k, b.fence, Outcome::new(200, b"fresh".to_vec()))
        .await
        .expect("the current holder completes");
    assert_fenced(
        store
            .writes()
            .complete(&k, a.fence, Outcome::new(200, b"stale".to_vec()))
            .await,
        a.fence,
        b.fence,
    );
    assert_eq!(
        view(store, &k).await.record.outcome,
        Some(Outcome::new(200, b"fresh".to_vec()))
    );
}

/// Leases expire by the store clock: a take-over is refused while the lease
/// is live and allowed, under a higher fence, once it expired.
pub async fn lease_expiry_and_take_over<F, Fut>(factory: &F)
where
    F: Fn(StoreOptions) -> Fut,
    Fut: Future<Output = Fixture>,
{
    let (fx, clock) = fixture(factory, idem_store::DEFAULT_MAX_OUTCOME_BYTES).await;
    let store = &fx.store;
    let k = key(1);
    let a = claimed(store, request(&k, 1, 1_000, 60_000, 1)).await;
    assert_not_eligible(
        store
            .records()
            .take_over(&k, a.fence, ms(1_000), holder(2), None)
            .await,
        RecordState::InProgress,
    );
    clock.advance(ms(999));
    assert_eq!(view(store, &k).await.lease_remaining_ms, 1);
    assert_not_eligible(
        store
            .records()
            .take_over(&k, a.fence, ms(1_000), holder(2), None)
            .await,
        RecordState::InProgress,
    );
    clock.advance(ms(1));
    assert_eq!(
        view(store, &k).await.lease_remaining_ms,
        0,
        "expired exactly at lease_until"
    );
    assert_fenced(
        store
            .records()
            .take_over(&k, a.fence + 1, ms(1_000), holder(2), None)
            .await,
        a.fence + 1,
        a.fence,
    );

    let b = store
        .records()
        .take_over(&k, a.fence, ms(2_000), holder(2), None)
        .await
        .expect("take over");
    assert!(b.fence > a.fence);
    assert_eq!((b.attempt, b.lease_until_ms), (2, START_MS + 1_000 + 2_000));
    let r = view(store, &k).await.record;
    assert_eq!(
        (r.state, r.fence, r.attempts),
        (RecordState::InProgress, b.fence, 2)
    );
    assert_eq!(r.holder, holder(2));
    assert_eq!(
        r.created_ms, START_MS,
        "a take-over keeps the record's creation time"
    );

    // Only one of two racing take-overs of the same observation wins.
    assert_not_eligible(
        store
            .records()
            .take_over(&k, b.fence, ms(1_000), holder(3), None)
            .await,
        RecordState::InProgress,
    );
    clock.advance(ms(2_000));
    let c = store
        .records()
        .take_over(&k, b.fence, ms(1_000), holder(3), None)
        .await
        .expect("take over again");
    assert_fenced(
        store
            .records()
            .take_over(&k, b.fence, ms(1_000), holder(4), None)
            .await,
        b.fence,
        c.fence,
    );
    assert_eq!(c.attempt, 3);
}

/// A holder whose lease expired but whom nobody took over still holds the
/// current fence, and may complete: the fence, not the lease, decides who
/// writes.
pub async fn expired_holder_may_still_write<F, Fut>(factory: &F)
where
    F: Fn(StoreOptions) -> Fut,
    Fut: Future<Output = Fixture>,
{
    let (fx, clock) = fixture(factory, idem_store::DEFAULT_MAX_OUTCOME_BYTES).await;
    let store = &fx.store;
    let k = key(1);
    let a = claimed(store, request(&k, 1, 1_000, 60_000, 1)).await;
    clock.advance(ms(5_000));
    let until = store
        .records()
        .heartbeat(&k, a.fence, ms(1_000))
        .await
        .expect("heartbeat after expiry");
    assert_eq!(until, START_MS + 6_000);
    clock.advance(ms(5_000));
    store
        .writes()
        .complete(&k, a.fence, Outcome::new(0, Vec::new()))
        .await
        .expect("complete after expiry");
    assert_eq!(view(store, &k).await.record.state, RecordState::Completed);
}

/// Take-over is never allowed for a final record.
pub async fn take_over_refused_for_final<F, Fut>(factory: &F)
where
    F: Fn(StoreOptions) -> Fut,
    Fut: Future<Output = Fixture>,
{
    let (fx, clock) = fixture(factory, idem_store::DEFAULT_MAX_OUTCOME_BYTES).await;
    let store = &fx.store;
    let (k1, k2) = (key(1), key(2));
    let a = claimed(store, request(&k1, 1, 1_000, 60_000, 1)).await;
    store
        .writes()
        .complete(&k1, a.fence, Outcome::new(200, Vec::new()))
        .await
        .expect("complete");
    let b = claimed(store, request(&k2, 1, 1_000, 60_000, 1)).await;
    store
        .writes()
        .fail(&k2, b.fence, false, Outcome::error(2, "card declined"))
        .await
        .expect("fail permanently");
    clock.advance(ms(10_000));
    assert_not_eligible(
        store
            .records()
            .take_over(&k1, a.fence, ms(1_000), holder(2), None)
            .await,
        RecordState::Completed,
    );
    assert_not_eligible(
        store
            .records()
            .take_over(&k2, b.fence, ms(1_000), holder(2), None)
            .await,
        RecordState::FailedPermanent,
    );
    assert_not_eligible(
        store.records().mark_unknown(&k1, a.fence).await,
        RecordState::Completed,
    );
    assert_eq!(view(store, &k1).await.record.fence, a.fence);
    assert_eq!(
        view(store, &k2).await.record.state,
        RecordState::FailedPermanent
    );
}

/// A heartbeat extends the lease by the store clock; a deposed holder's
/// heartbeat is fenced.
pub async fn heartbeat_extends_and_is_fenced<F, Fut>(factory: &F)
where
    F: Fn(StoreOptions) -> Fut,
    Fut: Future<Output = Fixture>,
{
    let (fx, clock) = fixture(factory, idem_store::DEFAULT_MAX_OUTCOME_BYTES).await;
    let store = &fx.store;
    let k = key(1);
    let a = claimed(store, request(&k, 1, 1_000, 60_000, 1)).await;
    clock.advance(ms(800));
    let until = store
        .records()
        .heartbeat(&k, a.fence, ms(1_000))
        .await
        .expect("heartbeat");
    assert_eq!(until, START_MS + 1_800);
    assert_eq!(view(store, &k).await.record.lease_until_ms, until);
    clock.advance(ms(500));
    assert_eq!(view(store, &k).await.lease_remaining_ms, 500);
    assert_not_eligible(
        store
            .records()
            .take_over(&k, a.fence, ms(1_000), holder(2), None)
            .await,
        RecordState::InProgress,
    );
    clock.advance(ms(500));
    let b = store
        .records()
        .take_over(&k, a.fence, ms(1_000), holder(2), None)
        .await
        .expect("take over");
    let before = view(store, &k).await.record;
    assert_fenced(
        store.records().heartbeat(&k, a.fence, ms(60_000)).await,
        a.fence,
        b.fence,
    );
    assert_eq!(view(store, &k).await.record, before);
}

/// A retryable failure may be taken over (attempts + 1); a permanent one
/// may not.
pub async fn fail_retryable_then_take_over<F, Fut>(factory: &F)
where
    F: Fn(StoreOptions) -> Fut,
    Fut: Future<Output = Fixture>,
{
    let (fx, _clock) = fixture(factory, idem_store::DEFAULT_MAX_OUTCOME_BYTES).await;
    let store = &fx.store;
    let k = key(1);
    let a = claimed(store, request(&k, 1, 60_000, 60_000, 1)).await;
    store
        .writes()
        .fail(&k, a.fence, true, Outcome::error(503, "gateway timeout"))
        .await
        .expect("fail");
    let dup = existing(store, request(&k, 1, 60_000, 60_000, 2)).await;
    assert_eq!(dup.view.record.state, RecordState::FailedRetryable);
    assert_eq!(
        dup.view.record.outcome,
        Some(Outcome::error(503, "gateway timeout"))
    );
    assert_not_in_progress(
        store
            .writes()
            .complete(&k, a.fence, Outcome::new(200, Vec::new()))
            .await,
        RecordState::FailedRetryable,
    );

    // No lease needs to expire: the failure ended the attempt.
    let b = store
        .records()
        .take_over(&k, a.fence, ms(60_000), holder(2), None)
        .await
        .expect("take over a retryable failure");
    assert!(b.fence > a.fence);
    assert_eq!(b.attempt, 2);
    let r = view(store, &k).await.record;
    assert_eq!(
        (r.state, r.outcome.as_ref()),
        (RecordState::InProgress, None)
    );
    store
        .writes()
        .fail(&k, b.fence, false, Outcome::error(402, "declined"))
        .await
        .expect("fail permanently");
    assert_not_eligible(
        store
            .records()
            .take_over(&k, b.fence, ms(60_000), holder(3), None)
            .await,
        RecordState::FailedPermanent,
    );
}

/// mark-unknown only after the lease expired, under the observed fence;
/// idempotent; the holder can no longer write; a take-over may follow.
pub async fn mark_unknown<F, Fut>(factory: &F)
where
    F: Fn(StoreOptions) -> Fut,
    Fut: Future<Output = Fixture>,
{
    let (fx, clock) = fixture(factory, idem_store::DEFAULT_MAX_OUTCOME_BYTES).await;
    let store = &fx.store;
    let k = key(1);
    let a = claimed(store, request(&k, 1, 1_000, 60_000, 1)).await;
    assert_not_eligible(
        store.records().mark_unknown(&k, a.fence).await,
        RecordState::InProgress,
    );
    clock.advance(ms(1_000));
    assert_fenced(
        store.records().mark_unknown(&k, a.fence + 1).await,
        a.fence + 1,
        a.fence,
    );
    store
        .records()
        .mark_unknown(&k, a.fence)
        .await
        .expect("mark unknown");
    store
        .records()
        .mark_unknown(&k, a.fence)
        .await
        .expect("mark unknown again is a no-op");
    let r = view(store, &k).await.record;
    assert_eq!((r.state, r.fence), (RecordState::OutcomeUnknown, a.fence));
    assert_not_in_progress(
        store
            .writes()
            .complete(&k, a.fence, Outcome::new(200, Vec::new()))
            .await,
        RecordState::OutcomeUnknown,
    );
    assert_eq!(view(store, &k).await.record, r);
    let b = store
        .records()
        .take_over(&k, a.fence, ms(1_000), holder(2), None)
        .await
        .expect("take over an unknown outcome");
    assert!(b.fence > a.fence);
    assert_gone(store.records().mark_unknown(&key(9), 1).await);
}
