//! Claims sent again after their answer was lost: the connection dropped
//! after the commit, so the claimer cannot know whether its claim was made.
//! A claim attempt carries a token ([`idem_store::HolderToken`]) stored with the
//! record; the same request sent again finds its own record and goes on as
//! that claim, where any other claimer (another token, or none) finds it in
//! progress.

use std::future::Future;

use super::Fixture;
use super::assert::{claimed, existing, fixture, holder, key, ms, request, view};
use idem_store::{
    AttemptEvent, AttemptFilter, ClaimOutcome, ClaimRequest, Holder, HolderToken, Outcome,
    RecordKey, RecordState, StoreError, StoreOptions,
};

/// Worker `who`'s request for `key` under a token of its own.
fn attempt(key: &RecordKey, fp: u32, lease_ms: u64, who: u32) -> ClaimRequest {
    ClaimRequest {
        holder: Holder {
            token: Some(HolderToken::new()),
            ..holder(who)
        },
        ..request(key, fp, lease_ms, 60_000, who)
    }
}

async fn events(store: &idem_store::Store, key: &RecordKey) -> Vec<(AttemptEvent, u64)> {
    store
        .records()
        .attempts(AttemptFilter {
            key: Some(key.clone()),
            ..AttemptFilter::default()
        })
        .await
        .expect("reading the attempt log")
        .into_iter()
        .map(|e| {
            assert!(
                e.holder.as_ref().is_none_or(|h| h.token.is_none()),
                "the attempt log keeps no token: {e:?}"
            );
            (e.event, e.fence)
        })
        .collect()
}

/// The same claim request sent again while its claim is live is that
/// claim (same fence, attempt 1, nothing written, nothing logged); another
/// token, no token, another fingerprint, a lapsed lease or an ended record
/// are duplicates as before. Single claims, batches and take-overs alike.
pub async fn claim_sent_again_is_the_same_claim<F, Fut>(factory: &F)
where
    F: Fn(StoreOptions) -> Fut,
    Fut: Future<Output = Fixture>,
{
    let (fx, clock) = fixture(factory, idem_store::DEFAULT_MAX_OUTCOME_BYTES).await;
    let store = &fx.store;
    let who = store.describe();

    // A single claim, sent twice.
    let k = key(1);
    let first = attempt(&k, 1, 5_000, 1);
    let claim = claimed(store, first.clone()).await;
    let kept = view(store, &k).await.record;
    assert_eq!(
        kept.holder.token, first.holder.token,
        "{who}: the token is kept"
    );
    clock.advance(ms(1_000));
    let again = claimed(store, first.clone()).await;
    assert_eq!(again, claim, "{who}: sent again, the same claim");
    assert_eq!(view(store, &k).await.record, kept, "{who}: nothing written");
    assert_eq!(
        events(store, &k).await,
        vec![(AttemptEvent::Executed, claim.fence)]
    );

    // Anyone else is a duplicate: another token, none, another operation.
    let other = existing(store, attempt(&k, 1, 5_000, 2)).await;
    assert_eq!(other.view.record.state, RecordState::InProgress);
    existing(store, request(&k, 1, 5_000, 60_000, 1)).await;
    let changed = ClaimRequest {
        fingerprint: super::fingerprint(2),
        ..first.clone()
    };
    assert!(!existing(store, changed).await.fingerprint_matches);

    // Ended: the same request is a duplicate of the ended record (a replay).
    store
        .writes()
        .complete(&k, claim.fence, Outcome::new(0, "done"))
        .await
        .expect("complete");
    let ended = existing(store, first.clone()).await;
    assert_eq!(ended.view.record.state, RecordState::Completed);

    // Lapsed: the lease ran out while the answer was lost; the record is
    // the policy's to decide, as any lapsed claim.
    let lapsed = key(2);
    let late = attempt(&lapsed, 1, 1_000, 1);
    claimed(store, late.clone()).await;
    clock.advance(ms(1_000));
    let found = existing(store, late).await;
    assert_eq!(
        (found.view.record.state, found.view.lease_remaining_ms),
        (RecordState::InProgress, 0),
        "{who}"
    );

    // A batch sent again: the claims it made are its own; the same attempt
    // twice in one batch is one claim and a duplicate of it.
    let (a, b) = (key(3), key(4));
    let batch = vec![attempt(&a, 1, 5_000, 1), attempt(&b, 1, 5_000, 1)];
    let made = claims(store.writes().claim_many(batch.clone()).await, who);
    let again = claims(store.writes().claim_many(batch.clone()).await, who);
    assert_eq!(made, again, "{who}: a batch sent again makes no new claim");
    let c = key(5);
    let twice = attempt(&c, 1, 5_000, 1);
    let answers = store
        .writes()
        .claim_many(vec![twice.clone(), twice])
        .await
        .expect("claim_many");
    assert!(
        matches!(
            answers.as_slice(),
            [Ok(ClaimOutcome::Claimed(_)), Ok(ClaimOutcome::Existing(_))]
        ),
        "{who}: the same attempt twice in a batch: {answers:?}"
    );

    // A take-over sent again is the same take-over; another holder sending
    // the one it observed is fenced by it.
    let t = key(6);
    let lapse = claimed(store, attempt(&t, 1, 1_000, 1)).await;
    clock.advance(ms(1_000));
    let taker = Holder {
        token: Some(HolderToken::new()),
        ..holder(2)
    };
    let took = store
        .records()
        .take_over(&t, lapse.fence, ms(5_000), taker.clone(), None)
        .await
        .expect("take over");
    assert!(
        took.fence > lapse.fence && took.attempt == 2,
        "{who}: {took:?}"
    );
    let retook = store
        .records()
        .take_over(&t, lapse.fence, ms(5_000), taker, None)
        .await
        .expect("the same take-over sent again");
    assert_eq!(retook, took, "{who}");
    let rival = store
        .records()
        .take_over(&t, lapse.fence, ms(5_000), holder(3), None)
        .await;
    assert!(
        matches!(rival, Err(StoreError::Fenced { current, .. }) if current == took.fence),
        "{who}: {rival:?}"
    );
    assert_eq!(
        events(store, &t)
            .await
            .into_iter()
            .filter(|(e, _)| *e == AttemptEvent::TakenOver)
            .count(),
        1,
        "{who}: one take-over logged"
    );
}

fn claims(
    answers: Result<Vec<Result<ClaimOutcome, StoreError>>, StoreError>,
    who: &str,
) -> Vec<idem_store::Claim> {
    answers
        .unwrap_or_else(|e| panic!("{who}: claim_many: {e}"))
        .into_iter()
        .map(|a| match a {
            Ok(ClaimOutcome::Claimed(c)) => c,
            other => panic!("{who}: expected Claimed, got {other:?}"),
        })
        .collect()
}
