//! Text no store keeps (a NUL: PostgreSQL's text refuses it): refused the
//! same on every store, before anything is written, as a refusal of the
//! request — never as an outage to wait out.

use std::future::Future;

use super::Fixture;
use super::assert::{claimed, fixture, key, ms, request, resolution, view};
use idem_store::{ErrorClass, Outcome, RecordState, Resolution, StoreError, StoreOptions};

/// A NUL in a claim's namespace, partition or holder is refused
/// ([`StoreError::InvalidRequest`], naming what held it) and nothing is
/// claimed; in a resolution's reason it is refused and the record still
/// waits; in a failed attempt's error text (what an effect's process said)
/// it is spelt `\u{0}`, so the holder can still record its end.
pub async fn unstorable_text_is_refused_before_anything_is_written<F, Fut>(factory: &F)
where
    F: Fn(StoreOptions) -> Fut,
    Fut: Future<Output = Fixture>,
{
    let (fx, clock) = fixture(factory, idem_store::DEFAULT_MAX_OUTCOME_BYTES).await;
    let store = &fx.store;
    let name = store.describe();

    let k = key(1);
    let nul = |text: &str| format!("{text}\u{0}x");
    let mut bad = Vec::new();
    let mut r = request(&k, 1, 1_000, 60_000, 1);
    r.holder.run_id = Some(nul("run"));
    bad.push(("the holder's run id", r));
    let mut r = request(&k, 1, 1_000, 60_000, 1);
    r.holder.host = nul("host");
    bad.push(("the holder's host", r));
    let mut r = request(&k, 1, 1_000, 60_000, 1);
    r.partition = nul("customer");
    bad.push(("the partition", r));
    for (what, request) in bad {
        match store.writes().claim(request).await {
            Err(e @ StoreError::InvalidRequest(_)) => {
                assert_eq!(e.class(), ErrorClass::Refused, "{name}");
                assert!(e.to_string().contains(what), "{name}: {e}");
                assert!(!e.to_string().contains('\0'), "{name}: {e:?}");
            }
            other => panic!("{name}: {what} with a NUL: expected a refusal, got {other:?}"),
        }
        assert_eq!(
            store.records().get(&k).await.expect("get"),
            None,
            "{name}: {what} with a NUL claimed the key"
        );
    }

    // An effect's error text with a NUL: the end is recorded, spelt out.
    let claim = claimed(store, request(&k, 1, 1_000, 60_000, 1)).await;
    store
        .writes()
        .fail(&k, claim.fence, true, Outcome::error(1, "boom\u{0}!"))
        .await
        .unwrap_or_else(|e| panic!("{name}: a failure whose text holds a NUL: {e}"));
    let failed = view(store, &k).await.record;
    assert_eq!(failed.state, RecordState::FailedRetryable, "{name}");
    assert_eq!(
        failed.outcome.and_then(|o| o.error).as_deref(),
        Some("boom\\u{0}!"),
        "{name}"
    );

    // A resolution's reason with a NUL: refused; the record still waits.
    let k2 = key(2);
    let held = claimed(store, request(&k2, 1, 1_000, 60_000, 1)).await;
    clock.advance(ms(1_000));
    let mut bad = resolution(&k2, held.fence, Resolution::Release);
    bad.reason = nul("checked the ledger");
    match store.records().resolve(bad).await {
        Err(e @ StoreError::InvalidRequest(_)) => {
            assert!(e.to_string().contains("reason"), "{name}: {e}")
        }
        other => panic!("{name}: a reason with a NUL: expected a refusal, got {other:?}"),
    }
    let waiting = view(store, &k2).await.record;
    assert_eq!(
        (waiting.state, waiting.fence),
        (RecordState::InProgress, held.fence),
        "{name}: a refused resolution changed the record"
    );
}
