//! Checks on what the store keeps across records and time: retention and
//! gc, the fence sequence across gc and reopening, the outcome size cap and
//! list filters.

use std::future::Future;

use super::Fixture;
use super::assert::{
    START_MS, assert_gone, claimed, fingerprint, fixture, holder, key, ms, request, view,
};
use idem_store::{
    ListFilter, Outcome, RecordKey, RecordState, RecordView, StoreError, StoreOptions,
    TRUNCATION_MARK,
};

/// `get_many` answers each key as `get` would, in the order asked (a key
/// asked twice answered twice; absent, other-namespace and past-retention
/// keys `None`), at one clock; no keys, no answers.
pub async fn get_many_is_gets_in_order<F, Fut>(factory: &F)
where
    F: Fn(StoreOptions) -> Fut,
    Fut: Future<Output = Fixture>,
{
    let (fx, clock) = fixture(factory, idem_store::DEFAULT_MAX_OUTCOME_BYTES).await;
    let store = &fx.store;
    let (open, done, absent, lapsed) = (key(1), key(2), key(3), key(4));
    claimed(store, request(&open, 1, 60_000, 60_000, 1)).await;
    let c = claimed(store, request(&done, 2, 60_000, 60_000, 2)).await;
    store
        .writes()
        .complete(&done, c.fence, Outcome::new(0, b"receipt".to_vec()))
        .await
        .expect("complete");
    claimed(store, request(&lapsed, 4, 1_000, 0, 4)).await;
    clock.advance(ms(1_001));
    let elsewhere = RecordKey::new("elsewhere", done.digest);
    let asked = [
        done.clone(),
        absent.clone(),
        open.clone(),
        done.clone(),
        lapsed.clone(),
        elsewhere,
    ];
    let many = store.records().get_many(&asked).await.expect("get_many");
    let mut one_by_one = Vec::new();
    for k in &asked {
        one_by_one.push(store.records().get(k).await.expect("get"));
    }
    assert_eq!(many, one_by_one);
    let states: Vec<Option<RecordState>> = many
        .iter()
        .map(|v| v.as_ref().map(|v| v.record.state))
        .collect();
    assert_eq!(
        states,
        [
            Some(RecordState::Completed),
            None,
            Some(RecordState::InProgress),
            Some(RecordState::Completed),
            None,
            None
        ]
    );
    assert!(
        store
            .records()
            .get_many(&[])
            .await
            .expect("no keys")
            .is_empty()
    );
}

/// Records live until their retention passes (store clock), then count as
/// absent and are collected; a live lease is never collected.
pub async fn retention_and_gc<F, Fut>(factory: &F)
where
    F: Fn(StoreOptions) -> Fut,
    Fut: Future<Output = Fixture>,
{
    let (fx, clock) = fixture(factory, idem_store::DEFAULT_MAX_OUTCOME_BYTES).await;
    let store = &fx.store;
    let (k1, k2) = (key(1), key(2));
    let a = claimed(store, request(&k1, 1, 1_000, 10_000, 1)).await;
    clock.advance(ms(500));
    store
        .writes()
        .complete(&k1, a.fence, Outcome::new(200, Vec::new()))
        .await
        .expect("complete");
    assert_eq!(
        view(store, &k1).await.record.retain_until_ms,
        START_MS + 500 + 10_000
    );

    // An in-progress record with retention 0 lives as long as its lease.
    let b = claimed(store, request(&k2, 1, 20_000, 0, 2)).await;
    clock.advance(ms(10_000)); // now = retain_until of k1: kept until strictly past.
    assert_eq!(store.records().gc().await.expect("gc"), 0);
    assert!(store.records().get(&k1).await.expect("get").is_some());
    clock.advance(ms(1));
    assert_eq!(
        store.records().get(&k1).await.expect("get"),
        None,
        "past retention counts as absent"
    );
    assert_eq!(
        store
            .records()
            .list(ListFilter::default())
            .await
            .expect("list")
            .len(),
        1
    );
    assert_gone(
        store
            .records()
            .take_over(&k1, a.fence, ms(1_000), holder(3), None)
            .await,
    );
    assert_eq!(store.records().gc().await.expect("gc"), 1);
    assert_eq!(store.records().gc().await.expect("gc"), 0);
    assert_eq!(
        view(store, &k2).await.record.fence,
        b.fence,
        "a live lease is never collected"
    );

    // k2's lease ends at START + 20_500, now is START + 10_501.
    clock.advance(ms(9_999));
    assert_eq!(store.records().gc().await.expect("gc"), 0);
    clock.advance(ms(1));
    assert_eq!(
        store.records().gc().await.expect("gc"),
        1,
        "an expired lease past retention is collected"
    );
    assert_gone(
        store
            .writes()
            .complete(&k2, b.fence, Outcome::new(200, Vec::new()))
            .await,
    );

    // An expired record is replaced by a claim without waiting for gc.
    let c = claimed(store, request(&k1, 2, 1_000, 0, 4)).await;
    store
        .writes()
        .fail(&k1, c.fence, true, Outcome::error(1, "x"))
        .await
        .expect("fail");
    clock.advance(ms(1));
    let d = claimed(store, request(&k1, 3, 1_000, 0, 5)).await;
    assert!(d.fence > c.fence);
    assert_eq!(d.attempt, 1, "a replaced record starts over");
    assert_eq!(view(store, &k1).await.record.fingerprint, fingerprint(3));
}

/// Fences strictly increase across keys, gc and (for persistent stores)
/// reopening.
pub async fn fence_monotonic_across_gc_and_reopen<F, Fut>(factory: &F)
where
    F: Fn(StoreOptions) -> Fut,
    Fut: Future<Output = Fixture>,
{
    let (fx, clock) = fixture(factory, idem_store::DEFAULT_MAX_OUTCOME_BYTES).await;
    let store = fx.store.clone();
    let mut last = 0;
    for n in 0..3 {
        let c = claimed(&store, request(&key(n), 1, 1_000, 0, 1)).await;
        assert!(c.fence > last, "fence {} after {last}", c.fence);
        last = c.fence;
        store
            .writes()
            .complete(&key(n), c.fence, Outcome::new(0, Vec::new()))
            .await
            .expect("complete");
    }
    clock.advance(ms(1));
    assert_eq!(store.records().gc().await.expect("gc"), 3);
    let c = claimed(&store, request(&key(0), 1, 1_000, 60_000, 1)).await;
    assert!(
        c.fence > last,
        "fence {} after gc, last was {last}",
        c.fence
    );
    last = c.fence;
    if let Some(reopen) = &fx.reopen {
        drop(store);
        let again = reopen().await;
        assert_eq!(
            view(&again, &key(0)).await.record.fence,
            last,
            "records survive reopening"
        );
        let d = claimed(&again, request(&key(7), 1, 1_000, 60_000, 1)).await;
        assert!(
            d.fence > last,
            "fence {} after reopen, last was {last}",
            d.fence
        );
    }
}

/// Outcome bodies over the limit are refused (nothing written, the claim
/// still held); long error text is cut and marked.
pub async fn outcome_size_cap<F, Fut>(factory: &F)
where
    F: Fn(StoreOptions) -> Fut,
    Fut: Future<Output = Fixture>,
{
    let (fx, _clock) = fixture(factory, 16).await;
    let store = &fx.store;
    let k = key(1);
    let a = claimed(store, request(&k, 1, 60_000, 60_000, 1)).await;
    match store
        .writes()
        .complete(&k, a.fence, Outcome::new(200, vec![7; 17]))
        .await
    {
        Err(StoreError::OutcomeTooLarge {
            size: 17,
            limit: 16,
            ..
        }) => {}
        other => panic!("expected OutcomeTooLarge, got {other:?}"),
    }
    assert!(matches!(
        store
            .writes()
            .fail(
                &k,
                a.fence,
                true,
                Outcome {
                    status: 1,
                    body: vec![0; 17],
                    error: None
                }
            )
            .await,
        Err(StoreError::OutcomeTooLarge { .. })
    ));
    assert_eq!(view(store, &k).await.record.state, RecordState::InProgress);
    store
        .writes()
        .complete(&k, a.fence, Outcome::new(200, vec![7; 16]))
        .await
        .expect("16 bytes fit");
    assert_eq!(
        view(store, &k).await.record.outcome.map(|o| o.body.len()),
        Some(16)
    );

    let k2 = key(2);
    let b = claimed(store, request(&k2, 1, 60_000, 60_000, 1)).await;
    store
        .writes()
        .fail(&k2, b.fence, true, Outcome::error(1, "x".repeat(100_000)))
        .await
        .expect("fail");
    let error = view(store, &k2)
        .await
        .record
        .outcome
        .and_then(|o| o.error)
        .expect("error text");
    assert!(
        error.len() <= idem_store::MAX_ERROR_BYTES && error.ends_with(TRUNCATION_MARK),
        "{} bytes",
        error.len()
    );
}

/// `list` filters by namespace, partition and state, newest first, with a
/// limit.
pub async fn list_filters<F, Fut>(factory: &F)
where
    F: Fn(StoreOptions) -> Fut,
    Fut: Future<Output = Fixture>,
{
    let (fx, clock) = fixture(factory, idem_store::DEFAULT_MAX_OUTCOME_BYTES).await;
    let store = &fx.store;
    let mut fences = Vec::new();
    for n in 0..4 {
        let mut req = request(&key(n), 1, 60_000, 60_000, 1);
        if n == 3 {
            req.key.namespace = "elsewhere".into();
            req.partition = "customer-2".into();
        }
        let key = req.key.clone();
        fences.push((key, claimed(store, req).await.fence));
        clock.advance(ms(10));
    }
    store
        .writes()
        .complete(&fences[0].0, fences[0].1, Outcome::new(0, Vec::new()))
        .await
        .expect("complete");
    let keys = |views: Vec<RecordView>| views.into_iter().map(|v| v.record.key).collect::<Vec<_>>();
    let all = keys(
        store
            .records()
            .list(ListFilter::default())
            .await
            .expect("list"),
    );
    let expected: Vec<RecordKey> = [0usize, 3, 2, 1]
        .iter()
        .map(|&i| fences[i].0.clone())
        .collect();
    assert_eq!(all, expected, "most recently updated first");
    let ns = ListFilter {
        namespace: Some("conformance".into()),
        ..ListFilter::default()
    };
    assert_eq!(
        store.records().list(ns.clone()).await.expect("list").len(),
        3
    );
    let limited = ListFilter {
        limit: Some(2),
        ..ns
    };
    assert_eq!(
        keys(store.records().list(limited).await.expect("list")),
        vec![fences[0].0.clone(), fences[2].0.clone()]
    );
    let done = ListFilter {
        state: Some(RecordState::Completed),
        ..ListFilter::default()
    };
    assert_eq!(
        keys(store.records().list(done).await.expect("list")),
        vec![fences[0].0.clone()]
    );
    let part = ListFilter {
        partition: Some("customer-2".into()),
        ..ListFilter::default()
    };
    assert_eq!(
        keys(store.records().list(part).await.expect("list")),
        vec![fences[3].0.clone()]
    );
}

/// `gc` of a backlog larger than one of its transactions (it deletes in
/// bounded batches): every expired record goes, with its log entries, and
/// nothing live goes with them; the count is exact.
pub async fn gc_removes_a_backlog_in_batches<F, Fut>(factory: &F)
where
    F: Fn(StoreOptions) -> Fut,
    Fut: Future<Output = Fixture>,
{
    let (fx, clock) = fixture(factory, idem_store::DEFAULT_MAX_OUTCOME_BYTES).await;
    let store = &fx.store;
    let name = store.describe();
    // 2,500 short-lived records (more than two gc batches), 50 long-lived,
    // and one in progress under a live lease with no retention at all.
    let expiring = 2_500u32;
    for chunk in (0..expiring).collect::<Vec<_>>().chunks(250) {
        let requests = chunk
            .iter()
            .map(|&n| request(&key(n), n, 100, 1_000, 1))
            .collect();
        let claims = store
            .writes()
            .claim_many(requests)
            .await
            .expect("claim_many");
        assert!(claims.iter().all(|c| c.is_ok()), "{name}");
    }
    for n in 0..50 {
        claimed(store, request(&key(10_000 + n), n, 100, 60_000, 1)).await;
    }
    let live = key(20_000);
    claimed(store, request(&live, 1, 600_000, 0, 1)).await;
    clock.advance(ms(2_000));
    assert_eq!(
        store.records().gc().await.expect("gc"),
        u64::from(expiring),
        "{name}: every expired record, however many batches it takes"
    );
    for gone in [key(0), key(expiring / 2), key(expiring - 1)] {
        assert!(
            store.records().get(&gone).await.expect("get").is_none(),
            "{name}"
        );
    }
    assert!(
        store
            .records()
            .get(&key(10_000))
            .await
            .expect("get")
            .is_some(),
        "{name}"
    );
    assert!(
        store.records().get(&live).await.expect("get").is_some(),
        "{name}"
    );
    let left = store
        .records()
        .attempts(idem_store::AttemptFilter::default())
        .await
        .expect("attempts");
    assert_eq!(left.len(), 51, "{name}: only the kept records' entries");
    assert_eq!(
        store.records().gc().await.expect("gc"),
        0,
        "{name}: nothing left to collect"
    );
}
