//! A lone worker's pair of writes: the end of one operation and the claim
//! of the next in one `write_many` call (PostgreSQL sends them in one
//! round trip, SQLite in one transaction). Each is answered, and logged, as
//! it would be alone.

use std::future::Future;

use super::Fixture;
use super::assert::{
    assert_fenced, assert_stale, claimed, fixture, holder, join, key, ms, owned, request, token,
    view,
};
use super::attempt_log::events_of;
use idem_store::{
    AttemptEvent, ClaimOutcome, Ending, Finish, Outcome, RecordState, Store, StoreError,
    StoreOptions, Write, WriteOutcome,
};

/// One pair: `finish` then `claim`, its two answers.
async fn pair(
    store: &Store,
    finish: Finish,
    claim: idem_store::ClaimRequest,
) -> (
    Result<WriteOutcome, StoreError>,
    Result<WriteOutcome, StoreError>,
) {
    let name = store.describe();
    let answers = store
        .writes()
        .write_many(vec![Write::Finish(finish), Write::Claim(claim)])
        .await
        .unwrap_or_else(|e| panic!("{name}: a pair: {e}"));
    let [finished, claimed] = <[_; 2]>::try_from(answers)
        .unwrap_or_else(|a| panic!("{name}: a pair got {} answers", a.len()));
    (finished, claimed)
}

fn completed(n: u32, fence: u64, body: &[u8]) -> Finish {
    Finish {
        key: key(n),
        fence,
        ending: Ending::Completed,
        outcome: Outcome::new(0, body.to_vec()),
    }
}

/// The end of one operation and the claim of another key in one call:
/// the holder's end recorded and the fresh key claimed under a new fence
/// (both logged); a deposed holder's end fenced (and logged) while the
/// claim beside it finds the record it met; an oversized outcome refused
/// alone while its claim is made; a claim under a stale ownership epoch
/// refused alone while the end beside it is recorded.
pub async fn a_finish_and_a_claim_in_one_call<F, Fut>(factory: &F)
where
    F: Fn(StoreOptions) -> Fut,
    Fut: Future<Output = Fixture>,
{
    let (fx, clock) = fixture(factory, 64).await;
    let store = &fx.store;
    let name = store.describe();

    // Ended and claimed.
    let first = claimed(store, request(&key(1), 1, 10_000, 60_000, 1)).await;
    let (finished, next) = pair(
        store,
        completed(1, first.fence, b"one"),
        request(&key(2), 1, 10_000, 60_000, 1),
    )
    .await;
    assert_eq!(finished.ok(), Some(WriteOutcome::Finished), "{name}: end 1");
    let second = match next {
        Ok(WriteOutcome::Claim(ClaimOutcome::Claimed(c))) => c,
        other => panic!("{name}: claim 2: expected a fresh claim, got {other:?}"),
    };
    assert!(second.fence > first.fence, "{name}: a new, higher fence");
    let one = view(store, &key(1)).await.record;
    assert_eq!(
        (one.state, one.outcome.map(|o| o.body)),
        (RecordState::Completed, Some(b"one".to_vec())),
        "{name}: key 1"
    );
    let two = view(store, &key(2)).await.record;
    assert_eq!(
        (two.state, two.fence, two.holder),
        (RecordState::InProgress, second.fence, holder(1)),
        "{name}: key 2"
    );
    assert_eq!(
        events_of(store, &key(1)).await,
        vec![
            (AttemptEvent::Executed, first.fence),
            (AttemptEvent::Completed, first.fence)
        ],
        "{name}: key 1's log"
    );
    assert_eq!(
        events_of(store, &key(2)).await,
        vec![(AttemptEvent::Executed, second.fence)],
        "{name}: key 2's log"
    );

    // A deposed holder's end beside a claim of a key already done.
    let deposed = claimed(store, request(&key(3), 1, 1_000, 60_000, 1)).await;
    clock.advance(ms(2_000));
    let taker = store
        .records()
        .take_over(&key(3), deposed.fence, ms(60_000), holder(2), None)
        .await
        .expect("take over key 3");
    let (finished, next) = pair(
        store,
        completed(3, deposed.fence, b"late"),
        request(&key(1), 1, 10_000, 60_000, 2),
    )
    .await;
    assert_fenced(finished, deposed.fence, taker.fence);
    match next {
        Ok(WriteOutcome::Claim(ClaimOutcome::Existing(e))) => assert_eq!(
            (e.view.record.state, e.view.record.fence),
            (RecordState::Completed, first.fence),
            "{name}: the claim finds key 1 done"
        ),
        other => panic!("{name}: claim 1 again: expected Existing, got {other:?}"),
    }
    assert!(
        events_of(store, &key(3))
            .await
            .contains(&(AttemptEvent::Fenced, deposed.fence)),
        "{name}: the fenced end is logged"
    );
    assert_eq!(
        view(store, &key(3)).await.record.fence,
        taker.fence,
        "{name}: the taker still holds key 3"
    );

    // An outcome too large, refused before the store; the claim is made.
    let (finished, next) = pair(
        store,
        completed(2, second.fence, &[b'x'; 65]),
        request(&key(4), 1, 10_000, 60_000, 1),
    )
    .await;
    match finished {
        Err(StoreError::OutcomeTooLarge { .. }) => {}
        other => panic!("{name}: oversized outcome: expected OutcomeTooLarge, got {other:?}"),
    }
    assert!(
        matches!(next, Ok(WriteOutcome::Claim(ClaimOutcome::Claimed(_)))),
        "{name}: claim 4 beside a refused end: {next:?}"
    );
    assert_eq!(
        view(store, &key(2)).await.record.state,
        RecordState::InProgress,
        "{name}: key 2 untouched by the refused end"
    );

    // A claim under a stale epoch, refused alone; the end beside it is
    // recorded. Then one under the current epoch is made.
    let before = join(store, "workers", &["a"]).await;
    let now = join(store, "workers", &["a", "b"]).await;
    let (finished, next) = pair(
        store,
        completed(2, second.fence, b"two"),
        owned(&key(5), 10_000, token("workers", before.epoch)),
    )
    .await;
    assert_eq!(finished.ok(), Some(WriteOutcome::Finished), "{name}: end 2");
    assert_stale(next, before.epoch, now.epoch);
    assert!(
        store.records().get(&key(5)).await.expect("get 5").is_none(),
        "{name}: nothing claimed under a stale epoch"
    );
    let taker_end = completed(3, taker.fence, b"three");
    let (finished, next) = pair(
        store,
        taker_end,
        owned(&key(5), 10_000, token("workers", now.epoch)),
    )
    .await;
    assert_eq!(finished.ok(), Some(WriteOutcome::Finished), "{name}: end 3");
    assert!(
        matches!(next, Ok(WriteOutcome::Claim(ClaimOutcome::Claimed(_)))),
        "{name}: claim 5 under the current epoch: {next:?}"
    );
    assert_eq!(
        view(store, &key(3)).await.record.state,
        RecordState::Completed,
        "{name}: key 3 completed by its taker"
    );
}
