//! The canonical operation a record keeps (so its key can be derived again
//! offline): kept by every path that makes a record, kept through a
//! take-over and an end, bounded, and switched off by the host.

use std::future::Future;

use super::Fixture;
use super::assert::{claimed, fixture, key, operation_of, request, view};
use idem_store::{
    ClaimOutcome, ClaimRequest, KeptOperation, MAX_KEPT_OPERATION_BYTES, NotKept, Outcome,
    RecordKey, Store, StoreError, StoreOptions,
};

async fn kept(store: &Store, key: &RecordKey) -> Option<KeptOperation> {
    view(store, key).await.record.operation
}

fn with_operation(key: &RecordKey, operation: Option<KeptOperation>) -> ClaimRequest {
    ClaimRequest {
        operation,
        ..request(key, 1, 1_000, 60_000, 1)
    }
}

/// An operation of exactly `bytes` bytes.
fn operation_of_len(bytes: usize) -> String {
    let head = r#"{"kind":"charge","tenant":"t","fields":{"note":""#;
    let tail = r#""}}"#;
    format!(
        "{head}{}{tail}",
        "x".repeat(bytes - head.len() - tail.len())
    )
}

/// A fresh claim keeps its operation, on the single and the batch paths;
/// it stays through an end, a failure and a take-over (the record's
/// operation is its first claim's), and is listed; a claim without one
/// keeps none; a text that is not a JSON object is refused and writes
/// nothing.
pub async fn records_keep_their_operation<F, Fut>(factory: &F)
where
    F: Fn(StoreOptions) -> Fut,
    Fut: Future<Output = Fixture>,
{
    let (fx, clock) = fixture(factory, idem_store::DEFAULT_MAX_OUTCOME_BYTES).await;
    let store = &fx.store;
    let name = store.describe();
    let expect = |k: &RecordKey| Some(KeptOperation::Kept(operation_of(k)));

    let a = claimed(store, request(&key(1), 1, 1_000, 60_000, 1)).await;
    assert_eq!(kept(store, &key(1)).await, expect(&key(1)), "{name}: claim");
    store
        .writes()
        .complete(&key(1), a.fence, Outcome::new(0, "ok"))
        .await
        .expect("complete");
    assert_eq!(
        kept(store, &key(1)).await,
        expect(&key(1)),
        "{name}: after complete"
    );

    let b = claimed(store, request(&key(2), 1, 1_000, 60_000, 1)).await;
    store
        .writes()
        .fail(&key(2), b.fence, true, Outcome::error(1, "try again"))
        .await
        .expect("fail");
    clock.advance(super::assert::ms(10));
    store
        .records()
        .take_over(
            &key(2),
            b.fence,
            super::assert::ms(1_000),
            super::holder(2),
            None,
        )
        .await
        .expect("take over");
    assert_eq!(
        kept(store, &key(2)).await,
        expect(&key(2)),
        "{name}: after take-over"
    );

    let batch = store
        .writes()
        .claim_many(vec![
            request(&key(3), 1, 1_000, 60_000, 1),
            with_operation(&key(4), None),
            request(&key(5), 1, 1_000, 60_000, 1),
        ])
        .await
        .expect("claim a batch");
    assert!(
        batch
            .iter()
            .all(|r| matches!(r, Ok(ClaimOutcome::Claimed(_)))),
        "{name}: {batch:?}"
    );
    assert_eq!(kept(store, &key(3)).await, expect(&key(3)), "{name}: batch");
    assert_eq!(
        kept(store, &key(4)).await,
        None,
        "{name}: batch, none given"
    );
    assert_eq!(kept(store, &key(5)).await, expect(&key(5)), "{name}: batch");

    let listed = store
        .records()
        .list(Default::default())
        .await
        .expect("list");
    for v in &listed {
        let want = if v.record.key == key(4) {
            None
        } else {
            expect(&v.record.key)
        };
        assert_eq!(v.record.operation, want, "{name}: listed {}", v.record.key);
    }

    for bad in ["not json", ""] {
        let refused = store
            .writes()
            .claim(with_operation(
                &key(6),
                Some(KeptOperation::Kept(bad.into())),
            ))
            .await;
        assert!(
            matches!(refused, Err(StoreError::InvalidRequest(_))),
            "{name}: `{bad}` as an operation: {refused:?}"
        );
    }
    assert_eq!(
        store.records().get(&key(6)).await.expect("get"),
        None,
        "{name}: nothing written"
    );
}

/// An operation up to [`MAX_KEPT_OPERATION_BYTES`] is kept; a longer one
/// is not, and the record says how long it was (single and batch paths);
/// a policy's "not kept" is kept as such.
pub async fn kept_operations_are_bounded<F, Fut>(factory: &F)
where
    F: Fn(StoreOptions) -> Fut,
    Fut: Future<Output = Fixture>,
{
    let (fx, _clock) = fixture(factory, idem_store::DEFAULT_MAX_OUTCOME_BYTES).await;
    let store = &fx.store;
    let name = store.describe();
    let at_bound = operation_of_len(MAX_KEPT_OPERATION_BYTES);
    let over = operation_of_len(MAX_KEPT_OPERATION_BYTES + 1);
    let too_large = Some(KeptOperation::NotKept(NotKept::TooLarge {
        bytes: MAX_KEPT_OPERATION_BYTES + 1,
    }));
    let by_policy = Some(KeptOperation::NotKept(NotKept::OffByPolicy));

    claimed(
        store,
        with_operation(&key(1), Some(KeptOperation::Kept(at_bound.clone()))),
    )
    .await;
    claimed(
        store,
        with_operation(&key(2), Some(KeptOperation::Kept(over.clone()))),
    )
    .await;
    claimed(store, with_operation(&key(3), by_policy.clone())).await;
    store
        .writes()
        .claim_many(vec![
            with_operation(&key(4), Some(KeptOperation::Kept(at_bound.clone()))),
            with_operation(&key(5), Some(KeptOperation::Kept(over))),
        ])
        .await
        .expect("claim a batch");
    let at_bound = Some(KeptOperation::Kept(at_bound));
    assert_eq!(kept(store, &key(1)).await, at_bound, "{name}: at the bound");
    assert_eq!(
        kept(store, &key(2)).await,
        too_large,
        "{name}: over the bound"
    );
    assert_eq!(
        kept(store, &key(3)).await,
        by_policy,
        "{name}: off by policy"
    );
    assert_eq!(
        kept(store, &key(4)).await,
        at_bound,
        "{name}: batch, at the bound"
    );
    assert_eq!(kept(store, &key(5)).await, too_large, "{name}: batch, over");
}

/// With `StoreOptions::keep_operations` off, no path keeps an operation:
/// each record says the host switched it off.
pub async fn keep_operations_off_keeps_none<F, Fut>(factory: &F)
where
    F: Fn(StoreOptions) -> Fut,
    Fut: Future<Output = Fixture>,
{
    let clock = idem_store::ManualClock::new(super::START_MS);
    let fx = factory(StoreOptions {
        clock: clock.store_clock(),
        keep_operations: false,
        ..StoreOptions::default()
    })
    .await;
    let store = &fx.store;
    let name = store.describe();
    let off = Some(KeptOperation::NotKept(NotKept::OffByHost));
    claimed(store, request(&key(1), 1, 1_000, 60_000, 1)).await;
    store
        .writes()
        .claim_many(vec![
            request(&key(2), 1, 1_000, 60_000, 1),
            request(&key(3), 1, 1_000, 60_000, 1),
        ])
        .await
        .expect("claim a batch");
    for n in 1..=3 {
        assert_eq!(kept(store, &key(n)).await, off, "{name}: key {n}");
    }
}

/// Records are found by their operation's fields (`idem inspect --field
/// invoice_id=R-189`): exactly the records whose kept operation has every
/// field asked for with that value — not one whose value only contains it,
/// nor one where it is in another field; a number by its spelling, text
/// with quotes and accents as written; with the other filters and a limit
/// counted among the matches. A record that kept no operation matches
/// none.
pub async fn records_are_found_by_their_fields<F, Fut>(factory: &F)
where
    F: Fn(StoreOptions) -> Fut,
    Fut: Future<Output = Fixture>,
{
    let (fx, clock) = fixture(factory, idem_store::DEFAULT_MAX_OUTCOME_BYTES).await;
    let store = &fx.store;
    let name = store.describe();
    let operations = [
        Some(r#"{"kind":"charge","tenant":"acme","fields":{"amount":100,"invoice_id":"R-189"}}"#),
        Some(r#"{"kind":"charge","tenant":"acme","fields":{"amount":100,"invoice_id":"R-1890"}}"#),
        Some(r#"{"kind":"charge","tenant":"beta","fields":{"amount":250,"invoice_id":"R-189"}}"#),
        Some(r#"{"kind":"refund","tenant":"acme","fields":{"note":"see R-189"}}"#),
        None,
        Some(r#"{"kind":"charge","tenant":"acme","fields":{"amount":1,"invoice_id":"Ré \"x\""}}"#),
    ];
    let mut fences = Vec::new();
    for (n, operation) in operations.iter().enumerate() {
        let k = key(n as u32 + 1);
        let claim = claimed(
            store,
            with_operation(&k, operation.map(|o| KeptOperation::Kept(o.to_string()))),
        )
        .await;
        fences.push(claim.fence);
        clock.advance(std::time::Duration::from_millis(1));
    }
    let found = async |fields: &[(&str, &str)], state, limit| -> Vec<u32> {
        let filter = idem_store::ListFilter {
            fields: fields
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect(),
            state,
            limit,
            ..idem_store::ListFilter::default()
        };
        let views = store.records().list(filter).await.expect("list");
        let mut found: Vec<u32> = views
            .iter()
            .map(|v| {
                (1..=6)
                    .find(|&n| v.record.key == key(n))
                    .expect("a key of this test")
            })
            .collect();
        found.sort_unstable();
        found
    };
    assert_eq!(
        found(&[("invoice_id", "R-189")], None, None).await,
        [1, 3],
        "{name}"
    );
    assert_eq!(
        found(&[("invoice_id", "R-189"), ("amount", "100")], None, None).await,
        [1],
        "{name}: every field"
    );
    assert_eq!(
        found(&[("amount", "250")], None, None).await,
        [3],
        "{name}: a number"
    );
    assert_eq!(
        found(&[("invoice_id", "Ré \"x\"")], None, None).await,
        [6],
        "{name}: quotes and accents"
    );
    assert!(
        found(&[("invoice_id", "R-18")], None, None)
            .await
            .is_empty(),
        "{name}: a part"
    );
    assert!(
        found(&[("nothing", "R-189")], None, None).await.is_empty(),
        "{name}: no field"
    );
    // Most recently updated first: the limit keeps key 3's, not key 2's
    // (which holds the text but not the value).
    assert_eq!(
        found(&[("invoice_id", "R-189")], None, Some(1)).await,
        [3],
        "{name}: limit"
    );
    store
        .writes()
        .complete(&key(1), fences[0], Outcome::new(0, "ok"))
        .await
        .expect("complete");
    assert_eq!(
        found(
            &[("invoice_id", "R-189")],
            Some(idem_store::RecordState::Completed),
            None
        )
        .await,
        [1],
        "{name}: with a state"
    );
}
