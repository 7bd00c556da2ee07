//! Checks on the batch calls: `claim_many` and `finish_many` answer as the
//! same single calls would, in order.

use std::future::Future;

use super::Fixture;
use super::assert::{
    START_MS, assert_fenced, assert_gone, assert_not_in_progress, assert_stale, claimed,
    fingerprint, fixture, holder, join, key, ms, owned, request, view,
};
use idem_store::{
    Claim, ClaimOutcome, ClaimRequest, Ending, Finish, Outcome, RecordState, StoreError,
    StoreOptions,
};

/// A batch of claims gets what the same claims one after the other would
/// have got, in order: fresh keys claimed under new fences (higher than any
/// before the batch, in an order of the store's choosing), a key
/// repeated in the batch finding its first occurrence's record, existing
/// records reported (with the fingerprint compared), a record past its
/// retention replaced, and a refused request (invalid, stale epoch)
/// refused alone. The claims are real: their holders complete them.
pub async fn claim_many_is_claims_in_order<F, Fut>(factory: &F)
where
    F: Fn(StoreOptions) -> Fut,
    Fut: Future<Output = Fixture>,
{
    let (fx, clock) = fixture(factory, idem_store::DEFAULT_MAX_OUTCOME_BYTES).await;
    let store = &fx.store;
    let name = store.describe();
    assert!(
        store
            .writes()
            .claim_many(Vec::new())
            .await
            .expect("empty batch")
            .is_empty(),
        "{name}: an empty batch claims nothing"
    );
    // Before: key 3 completed, key 5 failed with retention 0 (past it
    // once the clock moves), key 6 in progress under a live lease.
    let done = claimed(store, request(&key(3), 1, 1_000, 60_000, 1)).await;
    store
        .writes()
        .complete(&key(3), done.fence, Outcome::new(200, b"ok".to_vec()))
        .await
        .expect("complete");
    let dead = claimed(store, request(&key(5), 1, 1_000, 0, 1)).await;
    store
        .writes()
        .fail(&key(5), dead.fence, true, Outcome::error(1, "x"))
        .await
        .expect("fail");
    let running = claimed(store, request(&key(6), 1, 60_000, 60_000, 1)).await;
    let old = join(store, "batch", &["w-a"]).await;
    let new = join(store, "batch", &["w-b"]).await;
    clock.advance(ms(1));

    let invalid = ClaimRequest {
        policy_digest: "md5:nope".to_string(),
        ..request(&key(8), 1, 1_000, 60_000, 2)
    };
    let batch = vec![
        request(&key(1), 1, 10_000, 60_000, 2),
        request(&key(2), 1, 10_000, 60_000, 2),
        request(&key(1), 1, 10_000, 60_000, 3),
        request(&key(3), 1, 10_000, 60_000, 2),
        request(&key(3), 2, 10_000, 60_000, 2),
        request(&key(5), 3, 10_000, 60_000, 2),
        invalid,
        request(&key(6), 1, 10_000, 60_000, 2),
        owned(&key(7), 10_000, old.token()),
        request(&key(9), 1, 10_000, 60_000, 2),
    ];
    let mut out = store
        .writes()
        .claim_many(batch)
        .await
        .unwrap_or_else(|e| panic!("{name}: claim_many: {e}"))
        .into_iter();
    let mut next = |what: &str| {
        out.next()
            .unwrap_or_else(|| panic!("{name}: no outcome for {what}"))
    };
    let claim = |what: &str, r: Result<ClaimOutcome, StoreError>| match r {
        Ok(ClaimOutcome::Claimed(c)) => c,
        other => panic!("{name}: {what}: expected Claimed, got {other:?}"),
    };
    let existing = |what: &str, r: Result<ClaimOutcome, StoreError>| match r {
        Ok(ClaimOutcome::Existing(e)) => *e,
        other => panic!("{name}: {what}: expected Existing, got {other:?}"),
    };
    let k1 = claim("fresh key 1", next("key 1"));
    let k2 = claim("fresh key 2", next("key 2"));
    assert!(
        k1.fence > running.fence && k2.fence > running.fence && k1.fence != k2.fence,
        "{name}: new fences, higher than any before the batch"
    );
    let again = existing("key 1 again", next("key 1 again"));
    assert_eq!(
        (
            again.view.record.state,
            again.view.record.fence,
            again.fingerprint_matches
        ),
        (RecordState::InProgress, k1.fence, true),
        "{name}: a key repeated in a batch finds its first claim"
    );
    let replay = existing("completed key 3", next("key 3"));
    assert_eq!(
        (replay.view.record.state, replay.fingerprint_matches),
        (RecordState::Completed, true)
    );
    assert_eq!(
        replay
            .view
            .record
            .outcome
            .as_ref()
            .map(|o| o.body.as_slice()),
        Some(&b"ok"[..])
    );
    let conflict = existing("key 3, other fingerprint", next("key 3 again"));
    assert!(
        !conflict.fingerprint_matches,
        "{name}: fingerprint compared"
    );
    let replaced = claim("key 5 past retention", next("key 5"));
    assert!(replaced.fence > running.fence && replaced.attempt == 1);
    assert!(![k1.fence, k2.fence].contains(&replaced.fence));
    match next("invalid") {
        Err(StoreError::InvalidRequest(_)) => {}
        other => panic!("{name}: invalid request: expected InvalidRequest, got {other:?}"),
    }
    let busy = existing("key 6 in progress", next("key 6"));
    assert_eq!(
        (busy.view.record.state, busy.view.record.fence),
        (RecordState::InProgress, running.fence)
    );
    assert_stale(next("stale epoch"), old.epoch, new.epoch);
    let k9 = claim("fresh key 9 after refusals", next("key 9"));
    assert!(k9.fence > running.fence && ![k1.fence, k2.fence, replaced.fence].contains(&k9.fence));
    assert!(out.next().is_none(), "{name}: one outcome per request");

    // What the batch did is in the store, as single claims would leave it.
    for (k, c) in [
        (key(1), &k1),
        (key(2), &k2),
        (key(5), &replaced),
        (key(9), &k9),
    ] {
        let record = view(store, &k).await.record;
        assert_eq!(
            (record.state, record.fence, record.lease_until_ms),
            (RecordState::InProgress, c.fence, c.lease_until_ms),
            "{name}: {k}"
        );
    }
    assert_eq!(
        view(store, &key(5)).await.record.fingerprint,
        fingerprint(3)
    );
    for k in [key(7), key(8)] {
        assert_eq!(
            store.records().get(&k).await.expect("get"),
            None,
            "{name}: {k} refused, not written"
        );
    }
    store
        .writes()
        .complete(&key(1), k1.fence, Outcome::new(200, Vec::new()))
        .await
        .unwrap_or_else(|e| panic!("{name}: completing a batch claim: {e}"));
}

/// `finish_many` answers each holder as `complete`/`fail` would, in order:
/// completions, retryable and permanent failures written; a deposed holder
/// fenced, a finished record not in progress, a missing one gone, an
/// oversized outcome refused; a key repeated in the batch finds what its
/// first entry wrote. Each write is conditional on its own fence.
pub async fn finish_many_is_finishes_in_order<F, Fut>(factory: &F)
where
    F: Fn(StoreOptions) -> Fut,
    Fut: Future<Output = Fixture>,
{
    let (fx, clock) = fixture(factory, 64).await;
    let store = &fx.store;
    let name = store.describe();
    assert!(
        store
            .writes()
            .finish_many(Vec::new())
            .await
            .expect("empty batch")
            .is_empty(),
        "{name}: an empty batch finishes nothing"
    );
    let held: Vec<Claim> = {
        let mut held = Vec::new();
        for n in 1..=5 {
            held.push(claimed(store, request(&key(n), 1, 1_000, 60_000, 1)).await);
        }
        held
    };
    // Key 4's holder is deposed: its lease lapses and a take-over follows.
    clock.advance(ms(2_000));
    let taker = store
        .records()
        .take_over(&key(4), held[3].fence, ms(60_000), holder(2), None)
        .await
        .expect("take over key 4");
    // Key 5 is completed before the batch.
    store
        .writes()
        .complete(&key(5), held[4].fence, Outcome::new(0, b"first".to_vec()))
        .await
        .expect("complete key 5");
    let finish = |n: u32, fence: u64, ending: Ending, body: &[u8]| Finish {
        key: key(n),
        fence,
        ending,
        outcome: Outcome::new(0, body.to_vec()),
    };
    let batch = vec![
        finish(1, held[0].fence, Ending::Completed, b"one"),
        finish(2, held[1].fence, Ending::Failed { retryable: true }, b"two"),
        finish(
            3,
            held[2].fence,
            Ending::Failed { retryable: false },
            b"three",
        ),
        // The deposed holder, then the one that took over.
        finish(4, held[3].fence, Ending::Completed, b"stale"),
        finish(4, taker.fence, Ending::Completed, b"four"),
        finish(5, held[4].fence, Ending::Completed, b"again"),
        finish(6, 999_999, Ending::Completed, b"nobody"),
        // Key 1 again, after its completion earlier in this batch.
        finish(1, held[0].fence, Ending::Completed, b"twice"),
        finish(2, held[1].fence, Ending::Completed, &[b'x'; 65]),
    ];
    let mut out = store
        .writes()
        .finish_many(batch)
        .await
        .unwrap_or_else(|e| panic!("{name}: finish_many: {e}"))
        .into_iter();
    let mut next = |what: &str| {
        out.next()
            .unwrap_or_else(|| panic!("{name}: no result for {what}"))
    };
    for what in ["complete 1", "fail 2 retryable", "fail 3 permanent"] {
        next(what).unwrap_or_else(|e| panic!("{name}: {what}: {e}"));
    }
    assert_fenced(next("deposed holder of 4"), held[3].fence, taker.fence);
    next("taker of 4").unwrap_or_else(|e| panic!("{name}: taker of 4: {e}"));
    assert_not_in_progress(next("completed 5"), RecordState::Completed);
    assert_gone(next("no record 6"));
    assert_not_in_progress(next("1 again"), RecordState::Completed);
    match next("oversized outcome") {
        Err(StoreError::OutcomeTooLarge { .. }) => {}
        other => panic!("{name}: oversized outcome: expected OutcomeTooLarge, got {other:?}"),
    }
    assert!(out.next().is_none(), "{name}: one result per finish");

    // What the batch wrote is in the store, as single calls would leave it.
    for (n, state, body) in [
        (1, RecordState::Completed, &b"one"[..]),
        (2, RecordState::FailedRetryable, b"two"),
        (3, RecordState::FailedPermanent, b"three"),
        (4, RecordState::Completed, b"four"),
        (5, RecordState::Completed, b"first"),
    ] {
        let record = view(store, &key(n)).await.record;
        assert_eq!(
            (
                record.state,
                record.outcome.as_ref().map(|o| o.body.as_slice())
            ),
            (state, Some(body)),
            "{name}: key {n}"
        );
        assert_eq!(record.updated_ms, START_MS + 2_000, "{name}: key {n}");
    }
}

/// `write_many` answers each claim and finish as the single calls would,
/// whatever the mix: a fresh claim under a new fence, a key claimed twice
/// finding its first claim's record, a finish of a claim made earlier, a
/// deposed holder's finish fenced, an invalid claim and an oversized
/// outcome refused alone, the answers in the writes' order. Where the store
/// batches in one transaction ([`idem_store::Batching::one_transaction`]) all of it is one commit;
/// elsewhere claims and finishes go as a batch of each.
pub async fn write_many_is_writes_in_order<F, Fut>(factory: &F)
where
    F: Fn(StoreOptions) -> Fut,
    Fut: Future<Output = Fixture>,
{
    use idem_store::{Write, WriteOutcome};

    let (fx, clock) = fixture(factory, 64).await;
    let store = &fx.store;
    let name = store.describe();
    assert!(
        store
            .writes()
            .write_many(Vec::new())
            .await
            .expect("empty batch")
            .is_empty(),
        "{name}: an empty batch writes nothing"
    );
    let first = claimed(store, request(&key(1), 1, 1_000, 60_000, 1)).await;
    let deposed = claimed(store, request(&key(2), 1, 1_000, 60_000, 1)).await;
    clock.advance(ms(2_000));
    let taker = store
        .records()
        .take_over(&key(2), deposed.fence, ms(60_000), holder(2), None)
        .await
        .expect("take over key 2");
    let highest = first.fence.max(taker.fence);
    let finish = |n: u32, fence: u64, body: &[u8]| {
        Write::Finish(Finish {
            key: key(n),
            fence,
            ending: Ending::Completed,
            outcome: Outcome::new(0, body.to_vec()),
        })
    };
    let invalid = ClaimRequest {
        policy_digest: "md5:nope".to_string(),
        ..request(&key(9), 1, 1_000, 60_000, 2)
    };
    let batch = vec![
        Write::Claim(request(&key(3), 1, 10_000, 60_000, 2)),
        finish(1, first.fence, b"one"),
        Write::Claim(request(&key(3), 1, 10_000, 60_000, 3)),
        finish(2, deposed.fence, b"stale"),
        Write::Claim(invalid),
        finish(2, taker.fence, &[b'x'; 65]),
        Write::Claim(request(&key(1), 1, 10_000, 60_000, 2)),
    ];
    let mut out = store
        .writes()
        .write_many(batch)
        .await
        .unwrap_or_else(|e| panic!("{name}: write_many: {e}"))
        .into_iter();
    let mut next = |what: &str| {
        out.next()
            .unwrap_or_else(|| panic!("{name}: no answer for {what}"))
    };
    let fresh = match next("claim 3") {
        Ok(WriteOutcome::Claim(ClaimOutcome::Claimed(c))) => c,
        other => panic!("{name}: claim 3: expected a fresh claim, got {other:?}"),
    };
    assert!(
        fresh.fence > highest,
        "{name}: a new fence above the others"
    );
    assert_eq!(
        next("finish 1").unwrap_or_else(|e| panic!("{name}: finish 1: {e}")),
        WriteOutcome::Finished
    );
    match next("claim 3 again") {
        Ok(WriteOutcome::Claim(ClaimOutcome::Existing(e))) => {
            assert_eq!(
                e.view.record.fence, fresh.fence,
                "{name}: the first's record"
            );
        }
        other => panic!("{name}: claim 3 again: expected Existing, got {other:?}"),
    }
    assert_fenced(next("deposed holder of 2"), deposed.fence, taker.fence);
    match next("invalid claim") {
        Err(StoreError::InvalidRequest(_)) => {}
        other => panic!("{name}: invalid claim: expected InvalidRequest, got {other:?}"),
    }
    match next("oversized outcome") {
        Err(StoreError::OutcomeTooLarge { .. }) => {}
        other => panic!("{name}: oversized outcome: expected OutcomeTooLarge, got {other:?}"),
    }
    // A claim and a finish of one key in one call race as two callers
    // would: the claim finds the record in progress or completed.
    match next("claim 1, finished in the same batch") {
        Ok(WriteOutcome::Claim(ClaimOutcome::Existing(e))) => {
            assert_eq!(e.view.record.fence, first.fence, "{name}");
        }
        other => panic!("{name}: claim 1: expected Existing, got {other:?}"),
    }
    assert!(out.next().is_none(), "{name}: one answer per write");
    assert_eq!(
        view(store, &key(1)).await.record.state,
        RecordState::Completed,
        "{name}: key 1 completed"
    );
    assert_eq!(
        view(store, &key(2)).await.record.state,
        RecordState::InProgress,
        "{name}: key 2 is still the taker's"
    );
    assert!(
        store.records().get(&key(9)).await.expect("get").is_none(),
        "{name}: nothing written for the invalid claim"
    );
}
