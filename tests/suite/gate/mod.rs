//! The gate a downstream keeps (`Store::gates`), on every store: the
//! memory store, a real SQLite file and a real PostgreSQL schema. Two
//! holders of one key with fences 1 and 2, in either order and at once:
//! the downstream applies at most one, the lower fence is refused once the
//! higher is seen, a repeat replays. `in_tx.rs`: the form whose admission,
//! the downstream's writes and the result commit in one transaction.

mod in_tx;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use idem::store::{
    Admission, GateRequest, GateState, GateTicket, ManualClock, Store, StoreError, StoreOptions,
};
use idem_tests::{TestStore, postgres_url};

/// A request of `fence` under `key` at the `charges` gate.
pub(super) fn request(key: &str, fence: u64) -> GateRequest {
    GateRequest {
        gate: "charges".into(),
        key: key.into(),
        fence,
        fingerprint: Some(b"charge 100 EUR".to_vec()),
        window: Duration::from_secs(30),
    }
}

pub(super) fn ticket(answer: Admission) -> GateTicket {
    match answer {
        Admission::Admitted { ticket, .. } => ticket,
        other => panic!("expected an admission, got {other:?}"),
    }
}

/// The stores a test runs on, each with `clock`: memory, a SQLite file
/// and, when the environment names one, a fresh PostgreSQL schema (the
/// `TestStore`s drop theirs when the test ends).
async fn stores(test: &str, clock: &ManualClock) -> Vec<(Store, Option<TestStore>)> {
    let options = StoreOptions {
        clock: clock.store_clock(),
        ..StoreOptions::default()
    };
    let mut out = vec![(
        idem::store::open("memory:", options.clone()).await.unwrap(),
        None,
    )];
    let mut places = vec![TestStore::sqlite()];
    if let Some(url) = postgres_url(test) {
        places.push(TestStore::postgres(&url));
    }
    for place in places {
        let store = idem::store::open(&place.store, options.clone())
            .await
            .unwrap();
        out.push((store, Some(place)));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fence_one_then_two_applies_once_and_the_lower_is_refused_once_the_higher_is_seen() {
    let clock = ManualClock::new(1_000_000);
    for (store, _place) in stores("gate_fence_one_then_two", &clock).await {
        let gates = store.gates();
        let one = ticket(gates.admit(&request("k", 1)).await.unwrap());
        // The higher fence arrives while the first is applied: told to come
        // back, and remembered as the highest.
        assert_eq!(
            gates.admit(&request("k", 2)).await.unwrap(),
            Admission::Busy {
                in_flight: 1,
                retry_after_ms: 30_000
            },
            "{}",
            store.describe()
        );
        // The first's effect was applied: its result is kept, so the
        // second learns of it instead of applying it again.
        gates.record(&one, b"receipt 1".to_vec()).await.unwrap();
        assert_eq!(
            gates.admit(&request("k", 2)).await.unwrap(),
            Admission::Replay {
                result: b"receipt 1".to_vec(),
                fence: 1
            }
        );
        assert_eq!(
            gates.admit(&request("k", 1)).await.unwrap(),
            Admission::Stale { highest: 2 }
        );
        // A result is never overwritten.
        let again = gates.record(&one, b"receipt 1 again".to_vec()).await;
        assert!(
            matches!(again, Err(StoreError::GateRefused { .. })),
            "{again:?}"
        );
        let entry = gates.entry("charges", "k").await.unwrap().unwrap();
        assert_eq!(
            (
                entry.state,
                entry.highest_fence,
                entry.admission,
                entry.result
            ),
            (GateState::Done, 2, 1, Some(b"receipt 1".to_vec()))
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fence_two_then_one_refuses_the_lower_before_and_after_the_effect() {
    let clock = ManualClock::new(1_000_000);
    for (store, _place) in stores("gate_fence_two_then_one", &clock).await {
        let gates = store.gates();
        let two = ticket(gates.admit(&request("k", 2)).await.unwrap());
        assert_eq!(
            gates.admit(&request("k", 1)).await.unwrap(),
            Admission::Stale { highest: 2 },
            "{}",
            store.describe()
        );
        gates.record(&two, b"receipt 2".to_vec()).await.unwrap();
        assert_eq!(
            gates.admit(&request("k", 1)).await.unwrap(),
            Admission::Stale { highest: 2 }
        );
        // A repeat of the holder replays; so does a later, higher one.
        for fence in [2, 3] {
            assert_eq!(
                gates.admit(&request("k", fence)).await.unwrap(),
                Admission::Replay {
                    result: b"receipt 2".to_vec(),
                    fence: 2
                }
            );
        }
        assert_eq!(
            gates.admit(&request("k", 2)).await.unwrap(),
            Admission::Stale { highest: 3 }
        );
    }
}

/// Many holders of fences 1 and 2 at once, each applying when admitted
/// (a while, then its result), coming back when busy: one effect applied,
/// every holder not refused ends with it, and fence 1 is refused after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holders_of_fences_one_and_two_at_once_apply_once() {
    let clock = ManualClock::new(1_000_000);
    for (store, _place) in stores("gate_holders_at_once", &clock).await {
        let applied = Arc::new(AtomicU32::new(0));
        let holders = (0..16).map(|i| {
            let (store, applied) = (store.clone(), applied.clone());
            let fence = 1 + (i % 2);
            tokio::spawn(async move {
                loop {
                    match store.gates().admit(&request("k", fence)).await.unwrap() {
                        Admission::Admitted { ticket, .. } => {
                            applied.fetch_add(1, Ordering::SeqCst);
                            tokio::time::sleep(Duration::from_millis(20)).await;
                            let result = format!("receipt {fence}").into_bytes();
                            store.gates().record(&ticket, result.clone()).await.unwrap();
                            return Some(result);
                        }
                        Admission::Busy { .. } => {
                            tokio::time::sleep(Duration::from_millis(5)).await
                        }
                        Admission::Replay { result, .. } => return Some(result),
                        Admission::Stale { highest } => {
                            assert_eq!((fence, highest), (1, 2));
                            return None;
                        }
                        Admission::Mismatch => panic!("one request"),
                    }
                }
            })
        });
        let mut results = Vec::new();
        for holder in holders.collect::<Vec<_>>() {
            results.extend(holder.await.unwrap());
        }
        assert_eq!(applied.load(Ordering::SeqCst), 1, "{}", store.describe());
        assert!(results.iter().all(|r| *r == results[0]), "{results:?}");
        assert!(
            results.len() >= 8,
            "every holder of fence 2 ends with the result"
        );
        assert_eq!(
            store.gates().admit(&request("k", 1)).await.unwrap(),
            Admission::Stale { highest: 2 }
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lapsed_admission_is_named_to_the_next_and_can_no_longer_record() {
    let clock = ManualClock::new(1_000_000);
    for (store, _place) in stores("gate_lapsed_admission", &clock).await {
        let gates = store.gates();
        let one = ticket(gates.admit(&request("k", 1)).await.unwrap());
        // Extended, it still holds the key past its first window.
        clock.advance(Duration::from_secs(20));
        gates.extend(&one, Duration::from_secs(30)).await.unwrap();
        clock.advance(Duration::from_secs(20));
        assert!(matches!(
            gates.admit(&request("k", 2)).await.unwrap(),
            Admission::Busy { in_flight: 1, .. }
        ));
        // Its process stopped: the window runs out by the store's clock.
        clock.advance(Duration::from_secs(11));
        match gates.admit(&request("k", 2)).await.unwrap() {
            Admission::Admitted { ticket, lapsed } => {
                assert_eq!((ticket.fence, ticket.admission, lapsed), (2, 2, Some(1)))
            }
            other => panic!("{}: {other:?}", store.describe()),
        }
        for refused in [
            gates.record(&one, b"late".to_vec()).await,
            gates.release(&one).await,
            gates.extend(&one, Duration::from_secs(1)).await,
        ] {
            assert!(
                matches!(refused, Err(StoreError::GateRefused { .. })),
                "{refused:?}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_released_key_admits_the_next_holder_and_another_request_is_told_apart() {
    let clock = ManualClock::new(1_000_000);
    for (store, _place) in stores("gate_released_key", &clock).await {
        let gates = store.gates();
        let one = ticket(gates.admit(&request("k", 1)).await.unwrap());
        gates.release(&one).await.unwrap();
        let again = ticket(gates.admit(&request("k", 1)).await.unwrap());
        assert_eq!(
            (again.fence, again.admission),
            (1, 2),
            "{}",
            store.describe()
        );
        let other = GateRequest {
            fingerprint: Some(b"charge 999 EUR".to_vec()),
            ..request("k", 2)
        };
        assert_eq!(gates.admit(&other).await.unwrap(), Admission::Mismatch);
        // Keys and gates are apart.
        ticket(gates.admit(&request("other key", 1)).await.unwrap());
        let elsewhere = GateRequest {
            gate: "refunds".into(),
            ..request("k", 1)
        };
        ticket(gates.admit(&elsewhere).await.unwrap());
        // A key no store keeps is refused before anything is read.
        let empty = gates.admit(&request("", 1)).await;
        assert!(
            matches!(empty, Err(StoreError::InvalidRequest(_))),
            "{empty:?}"
        );
        let nul = gates.admit(&request("k\0", 1)).await;
        assert!(matches!(nul, Err(StoreError::InvalidRequest(_))), "{nul:?}");
        // Forgetting keeps what is in flight.
        clock.advance(Duration::from_secs(60));
        gates.record(&again, b"done".to_vec()).await.unwrap();
        clock.advance(Duration::from_secs(1));
        let now = clock.now_ms();
        assert_eq!(gates.forget("charges", now).await.unwrap(), 1);
        assert!(gates.entry("charges", "k").await.unwrap().is_none());
        assert!(gates.entry("charges", "other key").await.unwrap().is_some());
    }
}
