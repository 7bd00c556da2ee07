//! A claim whose effect commits with its end (`ClaimRequest::effect_atomic`):
//! the flag is kept by every path that makes or takes over a record, and a
//! duplicate meeting such a claim past its lease is told the truth — the
//! attempt did nothing, so it reads as a retryable failure — and may take
//! it over; the deposed holder's write is then refused.

use std::future::Future;

use super::Fixture;
use super::assert::{assert_fenced, claimed, existing, fixture, holder, key, ms, request, view};
use idem_store::{
    AttemptEvent, AttemptFilter, ClaimOutcome, ClaimRequest, EXPIRED_WITHOUT_EFFECT, Outcome,
    RecordKey, RecordState, Store, StoreOptions,
};

fn atomic(key: &RecordKey, who: u32) -> ClaimRequest {
    ClaimRequest {
        effect_atomic: true,
        ..request(key, 1, 1_000, 60_000, who)
    }
}

async fn flag(store: &Store, key: &RecordKey) -> bool {
    view(store, key).await.record.effect_atomic
}

fn operation() -> idem_core::Operation {
    idem_core::Operation::from_json(
        r#"{"kind":"k","tenant":"t"}"#,
        &idem_core::OperationLimits::default(),
    )
    .expect("an operation")
}

/// The flag round-trips on the single and the batch claim, and through
/// an end; a live atomic claim is in progress to a duplicate as any other;
/// past its lease a duplicate reads it as failed-retryable with
/// [`EXPIRED_WITHOUT_EFFECT`] (a claim without the flag stays in progress
/// and expired); a take-over of it is logged with that detail, keeps the
/// taker's flag (never the deposed holder's), and fences the late holder;
/// marking it outcome-unknown still works (a policy's choice).
pub async fn atomic_claims_re_execute_when_expired<F, Fut>(factory: &F)
where
    F: Fn(StoreOptions) -> Fut,
    Fut: Future<Output = Fixture>,
{
    let (fx, clock) = fixture(factory, idem_store::DEFAULT_MAX_OUTCOME_BYTES).await;
    let store = &fx.store;
    let name = store.describe();

    // Kept by the single claim, the batch claim and an end.
    let one = claimed(store, atomic(&key(1), 1)).await;
    claimed(store, request(&key(2), 1, 1_000, 60_000, 1)).await;
    assert!(flag(store, &key(1)).await, "{name}: a single atomic claim");
    assert!(!flag(store, &key(2)).await, "{name}: a plain claim");
    let batch = store
        .writes()
        .claim_many(vec![
            atomic(&key(3), 1),
            request(&key(4), 1, 1_000, 60_000, 1),
        ])
        .await
        .unwrap_or_else(|e| panic!("{name}: claim_many: {e}"));
    assert!(
        batch
            .iter()
            .all(|r| matches!(r, Ok(ClaimOutcome::Claimed(_)))),
        "{name}: {batch:?}"
    );
    assert!(flag(store, &key(3)).await, "{name}: a batched atomic claim");
    assert!(!flag(store, &key(4)).await, "{name}: a batched plain claim");
    store
        .writes()
        .complete(&key(1), one.fence, Outcome::new(0, "ok"))
        .await
        .expect("complete");
    assert!(flag(store, &key(1)).await, "{name}: after its end");

    // Live: in progress, as any claim.
    let five = claimed(store, atomic(&key(5), 1)).await;
    let plain = claimed(store, request(&key(6), 1, 1_000, 60_000, 1)).await;
    let live = existing(store, request(&key(5), 1, 1_000, 60_000, 2)).await;
    let ctx = live.duplicate_context(operation());
    assert_eq!(
        (ctx.state, ctx.outcome.is_none()),
        (RecordState::InProgress, true),
        "{name}: a live atomic claim"
    );

    // Expired: the atomic claim did nothing, and says so; the plain one may
    // have done its effect.
    clock.advance(ms(1_001));
    let dup = existing(store, request(&key(5), 1, 1_000, 60_000, 2)).await;
    assert_eq!(dup.view.record.state, RecordState::InProgress, "{name}");
    let ctx = dup.duplicate_context(operation());
    assert_eq!(
        (ctx.state, ctx.attempts, ctx.lease_remaining_ms),
        (RecordState::FailedRetryable, 1, 0),
        "{name}: an expired atomic claim"
    );
    let outcome = ctx.outcome.expect("an outcome summary");
    assert_eq!(
        (outcome.status, outcome.size, outcome.error.as_deref()),
        (0, 0, Some(EXPIRED_WITHOUT_EFFECT)),
        "{name}"
    );
    let ctx = existing(store, request(&key(6), 1, 1_000, 60_000, 2))
        .await
        .duplicate_context(operation());
    assert_eq!(
        (ctx.state, ctx.outcome),
        (RecordState::InProgress, None),
        "{name}: an expired plain claim"
    );

    // Taken over: logged as nothing done, the taker's flag kept, the late
    // holder fenced.
    let over = store
        .records()
        .take_over_as(&key(5), five.fence, ms(1_000), holder(2), None, true)
        .await
        .unwrap_or_else(|e| panic!("{name}: take over an expired atomic claim: {e}"));
    assert!(over.fence > five.fence, "{name}");
    assert_eq!(over.attempt, 2, "{name}");
    let record = view(store, &key(5)).await.record;
    assert_eq!(
        (record.state, record.effect_atomic, record.holder.pid),
        (RecordState::InProgress, true, holder(2).pid),
        "{name}"
    );
    assert_fenced(
        store
            .writes()
            .complete(&key(5), five.fence, Outcome::new(0, "late"))
            .await,
        five.fence,
        over.fence,
    );
    let entries = store
        .records()
        .attempts(AttemptFilter {
            key: Some(key(5)),
            ..AttemptFilter::default()
        })
        .await
        .expect("attempts");
    let taken: Vec<_> = entries
        .iter()
        .filter(|e| e.event == AttemptEvent::TakenOver)
        .collect();
    assert_eq!(taken.len(), 1, "{name}: {entries:?}");
    assert_eq!(
        (taken[0].fence, taken[0].detail.as_deref()),
        (over.fence, Some(EXPIRED_WITHOUT_EFFECT)),
        "{name}"
    );

    // A plain take-over of an atomic record leaves it plain; an atomic
    // take-over of a plain record makes it atomic, its entry saying nothing
    // of the kind (the plain attempt may have had its effect).
    clock.advance(ms(1_001));
    store
        .records()
        .take_over(&key(5), over.fence, ms(1_000), holder(3), None)
        .await
        .unwrap_or_else(|e| panic!("{name}: a plain take-over: {e}"));
    assert!(!flag(store, &key(5)).await, "{name}: the taker's flag");
    let six = store
        .records()
        .take_over_as(&key(6), plain.fence, ms(1_000), holder(2), None, true)
        .await
        .unwrap_or_else(|e| panic!("{name}: an atomic take-over of a plain claim: {e}"));
    assert!(flag(store, &key(6)).await, "{name}: the taker's flag");
    let entries = store
        .records()
        .attempts(AttemptFilter {
            key: Some(key(6)),
            ..AttemptFilter::default()
        })
        .await
        .expect("attempts");
    assert!(
        entries
            .iter()
            .filter(|e| e.event == AttemptEvent::TakenOver)
            .all(|e| e.fence == six.fence && e.detail.is_none()),
        "{name}: {entries:?}"
    );

    // Sending an expired atomic claim to review is still the store's to do
    // when asked.
    let seven = claimed(store, atomic(&key(7), 1)).await;
    clock.advance(ms(1_001));
    store
        .records()
        .mark_unknown(&key(7), seven.fence)
        .await
        .unwrap_or_else(|e| panic!("{name}: mark an expired atomic claim unknown: {e}"));
    assert_eq!(
        view(store, &key(7)).await.record.state,
        RecordState::OutcomeUnknown,
        "{name}"
    );
}
