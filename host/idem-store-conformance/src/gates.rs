//! The gate a downstream keeps (`Store::gates`): every store admits a
//! `(key, fence)` once, replays the stored result to a repeat, refuses a
//! fence lower than the highest seen, answers busy while an admission is
//! in flight (by the store's clock), records a result by its admission and
//! never overwrites it, and keeps all of it across reopening.

use std::future::Future;
use std::time::Duration;

use super::Fixture;
use super::assert::fixture;
use idem_store::{Admission, GateRequest, GateState, GateTicket, StoreError, StoreOptions};

fn request(key: &str, fence: u64, fingerprint: &[u8]) -> GateRequest {
    GateRequest {
        gate: "conformance".into(),
        key: key.into(),
        fence,
        fingerprint: Some(fingerprint.to_vec()),
        window: Duration::from_secs(10),
    }
}

fn admitted(answer: Admission, what: &str) -> (GateTicket, Option<u64>) {
    match answer {
        Admission::Admitted { ticket, lapsed } => (ticket, lapsed),
        other => panic!("{what}: expected an admission, got {other:?}"),
    }
}

/// The gate's answers and writes, the same on every store.
pub async fn the_gate_a_downstream_keeps<F, Fut>(factory: &F)
where
    F: Fn(StoreOptions) -> Fut,
    Fut: Future<Output = Fixture>,
{
    let (fx, clock) = fixture(factory, idem_store::DEFAULT_MAX_OUTCOME_BYTES).await;
    let store = &fx.store;
    let name = store.describe().to_string();
    let gates = store.gates();
    let admit = async |key: &str, fence: u64| {
        gates
            .admit(&request(key, fence, b"same"))
            .await
            .unwrap_or_else(|e| panic!("{name}: admit {key}@{fence}: {e}"))
    };

    // Admitted once; a higher fence meanwhile waits and is remembered.
    let (one, lapsed) = admitted(admit("a", 1).await, &name);
    assert_eq!((one.fence, one.admission, lapsed), (1, 1, None), "{name}");
    assert_eq!(
        admit("a", 2).await,
        Admission::Busy {
            in_flight: 1,
            retry_after_ms: 10_000
        },
        "{name}"
    );
    assert_eq!(
        admit("a", 1).await,
        Admission::Stale { highest: 2 },
        "{name}"
    );
    // The admitted effect's result is recorded, and replayed from then on.
    gates
        .record(&one, b"result a".to_vec())
        .await
        .unwrap_or_else(|e| panic!("{name}: record: {e}"));
    assert_eq!(
        admit("a", 2).await,
        Admission::Replay {
            result: b"result a".to_vec(),
            fence: 1
        },
        "{name}"
    );
    let twice = gates.record(&one, b"other".to_vec()).await;
    assert!(
        matches!(twice, Err(StoreError::GateRefused { .. })),
        "{name}: a result overwritten: {twice:?}"
    );
    // Another request under the key changes nothing.
    assert_eq!(
        gates.admit(&request("a", 3, b"other")).await.unwrap(),
        Admission::Mismatch,
        "{name}"
    );

    // Released, the key admits the next holder; lapsed by the store's
    // clock, the next is admitted and the old ticket refused.
    let (b1, _) = admitted(admit("b", 5).await, &name);
    gates.release(&b1).await.unwrap();
    let (b2, lapsed) = admitted(admit("b", 5).await, &name);
    assert_eq!((b2.admission, lapsed), (2, None), "{name}");
    clock.advance(Duration::from_secs(9));
    gates.extend(&b2, Duration::from_secs(10)).await.unwrap();
    clock.advance(Duration::from_secs(9));
    assert!(
        matches!(admit("b", 6).await, Admission::Busy { .. }),
        "{name}"
    );
    clock.advance(Duration::from_secs(2));
    let (b3, lapsed) = admitted(admit("b", 6).await, &name);
    assert_eq!((b3.fence, b3.admission, lapsed), (6, 3, Some(5)), "{name}");
    let late = gates.record(&b2, b"late".to_vec()).await;
    assert!(
        matches!(late, Err(StoreError::GateRefused { .. })),
        "{name}: {late:?}"
    );

    // What is kept, and kept across reopening.
    let check = async |store: &idem_store::Store| {
        let a = store.gates().entry("conformance", "a").await.unwrap();
        let a = a.unwrap_or_else(|| panic!("{name}: no entry"));
        assert_eq!(
            (a.state, a.highest_fence, a.admission, a.admitted_fence),
            (GateState::Done, 2, 1, 1),
            "{name}"
        );
        assert_eq!(a.result.as_deref(), Some(&b"result a"[..]), "{name}");
        assert_eq!(a.fingerprint.as_deref(), Some(&b"same"[..]), "{name}");
        let b = store.gates().entry("conformance", "b").await.unwrap();
        assert_eq!(
            b.map(|b| (b.state, b.admission)),
            Some((GateState::InFlight, 3))
        );
        assert!(
            store
                .gates()
                .entry("elsewhere", "a")
                .await
                .unwrap()
                .is_none()
        );
    };
    check(store).await;
    if let Some(reopen) = &fx.reopen {
        check(&reopen().await).await;
    }
}
