//! `idem serve`'s whole flow over real HTTP on SQLite and PostgreSQL:
//! begin, heartbeat, complete, replay, a stale fence refused, a retryable
//! failure re-executed under a higher fence, a lapsed claim resolved and
//! the resolution amended, the report.

use std::time::Duration;

use idem_store::{AttemptFilter, ListFilter, RecordState};
use serde_json::json;

use crate::serve::{Server, TestStore, op};

#[test]
fn the_whole_flow_over_http_on_each_store() {
    for store in TestStore::each("the_whole_flow_over_http_on_each_store") {
        whole_flow(&store);
    }
}

fn whole_flow(store: &TestStore) {
    let server = Server::start(&store.url, &["--lease", "3s"], &[]);
    let charge = op("i1", "100");

    // derive: the key, without the store.
    let derived = server.ok("/v1/derive", &json!({"operation": charge}));
    let key = derived["key"].as_str().unwrap().to_string();
    assert_eq!(derived["namespace"], "billing");
    assert_eq!(derived["partition"], "c1");
    assert!(store.events().is_empty(), "derive stored nothing");

    // begin: execute, with key, fence, attempt and lease.
    let begun = server.ok("/v1/begin", &json!({"operation": charge}));
    assert_eq!(begun["answer"], "execute", "{begun}");
    assert_eq!(begun["key"], key.as_str());
    assert_eq!(begun["attempt"], 1);
    assert_eq!(begun["take_over"], false);
    assert_eq!(begun["lease_ms"], 3000);
    let fence = begun["fence"].as_u64().unwrap();

    // A second begin while it runs: in progress, with Retry-After.
    let busy = server.post("/v1/begin", &json!({"operation": charge}));
    assert_eq!(busy.status, 200);
    assert_eq!(busy.json()["answer"], "in-progress", "{}", busy.text());
    assert!(busy.header("retry-after").is_some());

    // heartbeat under the fence moves the lease on.
    let beat = server.ok(
        "/v1/heartbeat",
        &json!({"key": key, "fence": fence, "lease_ms": 3000}),
    );
    assert!(beat["lease_until_ms"].as_u64().unwrap() >= begun["lease_until_ms"].as_u64().unwrap());

    // A stale fence is refused, naming it; nothing changes.
    let stale = server.post(
        "/v1/complete",
        &json!({"key": key, "fence": fence + 1, "body": "forged"}),
    );
    let p = stale.problem(409);
    assert_eq!(p["fence"], fence + 1);
    assert!(
        p["detail"]
            .as_str()
            .unwrap()
            .contains(&format!("fence {}", fence + 1))
    );

    // complete under the fence; the next begin replays it.
    let done = server.ok(
        "/v1/complete",
        &json!({"key": key, "fence": fence, "status": 0, "body": "receipt 42"}),
    );
    assert_eq!(done["state"], "completed");
    let replay = server.ok("/v1/begin", &json!({"operation": charge}));
    assert_eq!(replay["answer"], "replay", "{replay}");
    assert_eq!(replay["outcome"]["body"], "receipt 42");
    assert_eq!(replay["fence"], fence);
    // A completed record is never overwritten.
    server
        .post(
            "/v1/complete",
            &json!({"key": key, "fence": fence, "body": "again"}),
        )
        .problem(409);
    // The same key for another amount: a conflict.
    let other = server.ok("/v1/begin", &json!({"operation": op("i1", "250")}));
    assert_eq!(other["answer"], "conflict", "{other}");

    // A retryable failure: the next begin re-executes under a higher fence,
    // and the first holder's fence is refused from then on.
    let second = server.ok("/v1/begin", &json!({"operation": op("i2", "100")}));
    let (key2, fence2) = (second["key"].clone(), second["fence"].as_u64().unwrap());
    let failed = server.ok(
        "/v1/fail",
        &json!({"key": key2, "fence": fence2, "retryable": true, "error": "provider timeout"}),
    );
    assert_eq!(failed["state"], "failed-retryable");
    let retried = server.ok("/v1/begin", &json!({"operation": op("i2", "100")}));
    assert_eq!(retried["answer"], "execute", "{retried}");
    assert_eq!(retried["take_over"], true);
    assert_eq!(retried["attempt"], 2);
    assert!(retried["fence"].as_u64().unwrap() > fence2);
    server
        .post("/v1/complete", &json!({"key": key2, "fence": fence2}))
        .problem(409);

    // A holder that goes silent past its lease: the record waits for
    // review, and a person releases it under the fence they saw.
    let third = server.ok("/v1/begin", &json!({"operation": op("i3", "100")}));
    let (key3, fence3) = (third["key"].clone(), third["fence"].as_u64().unwrap());
    std::thread::sleep(Duration::from_millis(3500));
    let resolved = server.ok(
        "/v1/resolve",
        &json!({"key": key3, "fence": fence3, "resolution": "release",
                "reason": "the provider has no such charge", "by": "ops"}),
    );
    assert_eq!(resolved["state"], "failed-retryable");
    assert_eq!(resolved["amended"], false);
    let released = resolved["fence"].as_u64().unwrap();
    assert!(released > fence3);
    // The silent holder's late completion is refused.
    server
        .post("/v1/complete", &json!({"key": key3, "fence": fence3}))
        .problem(409);

    // The release was a mistake: a person amends it to a rejection, under
    // the fence the release wrote; the log keeps both decisions.
    let amend = |fence: u64, resolution: &str| {
        json!({"key": key3, "fence": fence, "resolution": resolution, "amend": true,
               "reason": "the provider did charge it after all", "by": "ops-2"})
    };
    let amended = server.ok("/v1/resolve", &amend(released, "reject"));
    assert_eq!(amended["state"], "failed-permanent", "{amended}");
    assert_eq!(amended["amended"], true);
    let rejected = amended["fence"].as_u64().unwrap();
    assert!(rejected > released);
    // A second amendment from the fence the first one replaced: refused,
    // naming the fence the record is at now.
    let stale = server
        .post("/v1/resolve", &amend(released, "release"))
        .problem(409);
    assert_eq!(
        stale["type"].as_str().map(|t| t.ends_with("stale-fence")),
        Some(true),
        "{stale}"
    );
    assert_eq!(stale["current_fence"], rejected);
    // A completed record's outcome is never amended, nor a holder's own end.
    let completed = server
        .post(
            "/v1/resolve",
            &json!({"key": key, "fence": fence, "resolution": "reject", "amend": true,
                    "reason": "no", "by": "ops-2"}),
        )
        .problem(409);
    assert!(
        completed["type"]
            .as_str()
            .unwrap()
            .ends_with("not-amendable"),
        "{completed}"
    );
    assert_eq!(completed["state"], "completed");
    // Put back as the person first meant it: released, so the next begin
    // executes again.
    let back = server.ok("/v1/resolve", &amend(rejected, "release"));
    assert_eq!(back["state"], "failed-retryable", "{back}");
    let (rt, handle) = store.open();
    let log = rt
        .block_on(handle.records().attempts(AttemptFilter::default()))
        .unwrap();
    let amends = format!("amends resolved-released at fence {released}: ");
    assert!(
        log.iter().any(|e| e.actor.as_deref() == Some("ops-2")
            && e.detail.as_deref().is_some_and(|d| d.starts_with(&amends))),
        "the log keeps the first decision beside the amendment"
    );
    let again = server.ok("/v1/begin", &json!({"operation": op("i3", "100")}));
    assert_eq!(again["answer"], "execute");
    assert_eq!(again["take_over"], true);

    // The report sees i1 asked for four times (execute, in progress,
    // replay, conflict).
    let report = server.ok("/v1/report", &json!({}));
    assert_eq!(report["namespace"], "billing");
    let busiest = report["busiest"].as_array().unwrap();
    assert!(
        busiest
            .iter()
            .any(|b| b[0] == format!("billing/{key}") && b[1].as_u64() >= Some(4)),
        "{report}"
    );
    let one = server.ok("/v1/report", &json!({"key": key}));
    assert_eq!(one["keys"], 1, "{one}");

    // What the store holds is what the calls said.
    let (rt, handle) = store.open();
    let records = rt
        .block_on(handle.records().list(ListFilter::default()))
        .unwrap();
    assert_eq!(records.len(), 3);
    let first = records
        .iter()
        .find(|v| v.record.key.digest.to_hex() == key)
        .unwrap();
    assert_eq!(first.record.state, RecordState::Completed);
    assert_eq!(first.record.outcome.as_ref().unwrap().body, b"receipt 42");
}
