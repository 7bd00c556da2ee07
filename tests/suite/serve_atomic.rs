//! `idem serve`'s begin with `"atomic": true`: a client that completes in
//! its own transaction on the store's PostgreSQL database says so, and its
//! claim, once expired, is re-executed by the next begin instead of being
//! sent to review (the sidecar's policy is `billing-charge`, which sends
//! any other expired claim to review); elsewhere it is refused, nothing
//! claimed.

use std::time::Duration;

use idem_store::{AttemptEvent, AttemptFilter, Digest, EXPIRED_WITHOUT_EFFECT, RecordKey};
use idem_tests::postgres_url;
use serde_json::json;

use crate::serve::{Server, TestStore, op};

/// The record under `key` (hex) in the billing namespace.
fn record(store: &TestStore, key: &str) -> idem_store::RecordView {
    let (rt, opened) = store.open();
    let key = RecordKey::new("billing", Digest::from_hex(key).unwrap());
    rt.block_on(opened.records().get(&key)).unwrap().unwrap()
}

#[test]
fn an_atomic_begin_is_refused_where_no_client_can_share_the_transaction() {
    let store = TestStore::sqlite();
    let server = Server::start(&store.url, &[], &[]);
    let refused = server
        .post(
            "/v1/begin",
            &json!({"operation": op("i1", "100"), "atomic": true}),
        )
        .problem(400);
    assert_eq!(refused["member"], "atomic", "{refused}");
    assert!(
        refused["detail"].as_str().unwrap().contains("PostgreSQL"),
        "{refused}"
    );
    assert!(store.events().is_empty(), "nothing was claimed");
    // `derive` takes no such member.
    server
        .post(
            "/v1/derive",
            &json!({"operation": op("i1", "100"), "atomic": true}),
        )
        .problem(400);
    // `false` is a plain begin, and the record says so.
    let begun = server.ok(
        "/v1/begin",
        &json!({"operation": op("i1", "100"), "atomic": false}),
    );
    assert_eq!(begun["answer"], "execute", "{begun}");
    let view = record(&store, begun["key"].as_str().unwrap());
    assert!(!view.record.effect_atomic);
}

#[test]
fn an_expired_atomic_claim_is_re_executed_by_the_next_begin() {
    let Some(url) = postgres_url("an_expired_atomic_claim_is_re_executed_by_the_next_begin") else {
        return;
    };
    let store = TestStore::postgres(&url);
    let server = Server::start(&store.url, &["--lease", "1s"], &[]);
    let atomic = json!({"operation": op("i1", "100"), "atomic": true});
    let first = server.ok("/v1/begin", &atomic);
    assert_eq!(first["answer"], "execute", "{first}");
    let key = first["key"].as_str().unwrap().to_string();
    let fence = first["fence"].as_u64().unwrap();
    assert!(record(&store, &key).record.effect_atomic);

    // The client dies holding it; wait until the store's clock says its
    // lease is over.
    for _ in 0..300 {
        if record(&store, &key).lease_remaining_ms == 0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(record(&store, &key).lease_remaining_ms, 0);

    let again = server.ok("/v1/begin", &atomic);
    assert_eq!(again["answer"], "execute", "{again}");
    assert_eq!(again["take_over"], true);
    assert_eq!(again["attempt"], 2);
    assert!(again["fence"].as_u64().unwrap() > fence);
    // The dead client's late completion is refused.
    server
        .post("/v1/complete", &json!({"key": key, "fence": fence}))
        .problem(409);

    let (rt, opened) = store.open();
    let entries = rt
        .block_on(opened.records().attempts(AttemptFilter::default()))
        .unwrap();
    let taken: Vec<_> = entries
        .iter()
        .filter(|e| e.event == AttemptEvent::TakenOver)
        .collect();
    assert_eq!(taken.len(), 1, "{entries:#?}");
    assert_eq!(taken[0].detail.as_deref(), Some(EXPIRED_WITHOUT_EFFECT));
    assert!(
        entries
            .iter()
            .all(|e| e.event != AttemptEvent::MarkedUnknown),
        "nothing was sent to review: {entries:#?}"
    );
}
