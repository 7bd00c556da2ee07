//! Checks on partitioned ownership: membership epochs, and stale epochs
//! refused.

use std::future::Future;

use super::Fixture;
use super::assert::{
    assert_fenced, assert_stale, claimed, existing, fixture, holder, join, key, ms, names, owned,
    request, token, view,
};
use idem_store::{Outcome, RecordState, StoreError, StoreOptions};

/// Memberships and their epochs: registering the same members (in any
/// order, with repeats) keeps the epoch; different members move it, from a
/// store-wide monotonic sequence that survives reopening; bad memberships
/// are refused.
pub async fn membership_epochs<F, Fut>(factory: &F)
where
    F: Fn(StoreOptions) -> Fut,
    Fut: Future<Output = Fixture>,
{
    let (fx, _clock) = fixture(factory, idem_store::DEFAULT_MAX_OUTCOME_BYTES).await;
    let store = fx.store.clone();
    assert_eq!(
        store.ownership().membership("nightly").await.expect("read"),
        None
    );
    let first = join(&store, "nightly", &["w-b", "w-a", "w-b"]).await;
    assert!(first.epoch > 0);
    assert_eq!(first.members, names(&["w-a", "w-b"]), "sorted, no repeats");
    let same = join(&store, "nightly", &["w-a", "w-b"]).await;
    assert_eq!(same, first, "the same members keep the epoch");
    let other = join(&store, "hourly", &["x"]).await;
    assert!(other.epoch > first.epoch, "epochs are store-wide");
    let grown = join(&store, "nightly", &["w-a", "w-b", "w-c"]).await;
    assert!(grown.epoch > other.epoch, "{grown:?} after {other:?}");
    let shrunk = join(&store, "nightly", &["w-a", "w-b"]).await;
    assert!(
        shrunk.epoch > grown.epoch,
        "going back to an old membership is a new epoch"
    );
    assert_eq!(
        store.ownership().membership("nightly").await.expect("read"),
        Some(shrunk.clone())
    );
    assert_eq!(
        store.ownership().membership("hourly").await.expect("read"),
        Some(other.clone()),
        "groups are independent"
    );
    for bad in [
        vec![],
        names(&[""]),
        names(&["a\nb"]),
        names(&["ok", "tab\t"]),
    ] {
        match store.ownership().join_membership("nightly", &bad).await {
            Err(StoreError::InvalidRequest(_)) => {}
            other => panic!("members {bad:?}: expected InvalidRequest, got {other:?}"),
        }
    }
    assert!(matches!(
        store.ownership().join_membership("", &names(&["a"])).await,
        Err(StoreError::InvalidRequest(_))
    ));
    assert_eq!(
        store.ownership().membership("nightly").await.expect("read"),
        Some(shrunk.clone()),
        "a refused membership changes nothing"
    );
    if let Some(reopen) = &fx.reopen {
        drop(store);
        let again = reopen().await;
        assert_eq!(
            again.ownership().membership("nightly").await.expect("read"),
            Some(shrunk.clone()),
            "memberships survive reopening"
        );
        let next = join(&again, "nightly", &["w-z"]).await;
        assert!(next.epoch > shrunk.epoch, "epochs survive reopening");
    }
}

/// A claim or take-over under a stale ownership epoch is refused and
/// changes nothing: the owner deposed while paused cannot start an effect
/// when it wakes. The current epoch is accepted; a claim without a token is
/// not checked.
pub async fn stale_epoch_is_refused<F, Fut>(factory: &F)
where
    F: Fn(StoreOptions) -> Fut,
    Fut: Future<Output = Fixture>,
{
    let (fx, clock) = fixture(factory, idem_store::DEFAULT_MAX_OUTCOME_BYTES).await;
    let store = &fx.store;
    // No membership yet: no epoch is current.
    assert_stale(
        store
            .writes()
            .claim(owned(&key(9), 1_000, token("nightly", 1)))
            .await,
        1,
        0,
    );
    assert_eq!(store.records().get(&key(9)).await.expect("get"), None);

    let old = join(store, "nightly", &["w-a", "w-b"]).await;
    let hourly = join(store, "hourly", &["w-a"]).await;
    // The old owner claims key 1 under its epoch, then pauses.
    let a = claimed(store, owned(&key(1), 1_000, old.token())).await;
    // Meanwhile the membership changes: the old owner is deposed.
    let new = join(store, "nightly", &["w-b", "w-c"]).await;
    assert!(new.epoch > old.epoch);
    // It wakes: a fresh claim under its stale epoch is refused...
    assert_stale(
        store
            .writes()
            .claim(owned(&key(2), 1_000, old.token()))
            .await,
        old.epoch,
        new.epoch,
    );
    assert_eq!(
        store.records().get(&key(2)).await.expect("get"),
        None,
        "nothing written"
    );
    // ...and so is a take-over of its own expired claim.
    clock.advance(ms(1_000));
    assert_stale(
        store
            .records()
            .take_over(&key(1), a.fence, ms(1_000), holder(1), Some(&old.token()))
            .await,
        old.epoch,
        new.epoch,
    );
    let record = view(store, &key(1)).await.record;
    assert_eq!(
        (record.fence, record.attempts, record.state),
        (a.fence, 1, RecordState::InProgress),
        "a refused take-over changes nothing"
    );
    // An epoch this store never issued to the group is refused too.
    assert_stale(
        store
            .writes()
            .claim(owned(&key(3), 1_000, token("nightly", new.epoch + 1)))
            .await,
        new.epoch + 1,
        new.epoch,
    );
    // The current owner claims and takes over under the current epoch.
    let b = claimed(store, owned(&key(2), 1_000, new.token())).await;
    assert!(b.fence > a.fence);
    let c = store
        .records()
        .take_over(&key(1), a.fence, ms(1_000), holder(2), Some(&new.token()))
        .await
        .expect("take-over under the current epoch");
    assert!(c.fence > b.fence);
    // The deposed holder's fence no longer writes either.
    assert_fenced(
        store
            .writes()
            .complete(&key(1), a.fence, Outcome::new(0, Vec::new()))
            .await,
        a.fence,
        c.fence,
    );
    // A duplicate under the current epoch sees the record (not refused).
    existing(store, owned(&key(2), 1_000, new.token())).await;
    // Another group's epoch is unaffected; no token, no check.
    claimed(store, owned(&key(4), 1_000, hourly.token())).await;
    claimed(store, request(&key(5), 1, 1_000, 60_000, 1)).await;
}
