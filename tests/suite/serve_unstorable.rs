//! A NUL character (which no store keeps: PostgreSQL's text refuses it)
//! through every route of `idem serve` that takes text, on SQLite and
//! PostgreSQL: refused `400` naming the member or field, nothing claimed,
//! never a `503` that would have the client try again for ever.

use idem_store::{ListFilter, RecordState};
use serde_json::{Value, json};

use crate::serve::{Server, TestStore, op};

/// Checks a refusal of a NUL: `400` or `422`, naming `what`.
fn refused(server: &Server, path: &str, body: &Value, what: &str) {
    let reply = server.post(path, body);
    assert!(
        matches!(reply.status, 400 | 422),
        "{path} {body}: {} {}",
        reply.status,
        reply.text()
    );
    let p = reply.problem(reply.status);
    let detail = p["detail"].as_str().unwrap();
    assert!(
        detail.contains(what) || p["member"] == what || p["field"] == what,
        "{path}: the refusal names {what}: {p}"
    );
    // (A run's members refuse every control character, a NUL among them.)
    assert!(
        detail.contains("NUL") || detail.contains("control characters"),
        "{p}"
    );
}

#[test]
fn a_nul_is_refused_naming_its_field_on_each_store() {
    for store in TestStore::each("serve_unstorable") {
        let server = Server::start(&store.url, &[], &[]);
        // In an operation's field, and in its run.
        let mut poisoned = op("R-\u{0}189", "100");
        refused(
            &server,
            "/v1/begin",
            &json!({"operation": poisoned}),
            "invoice_id",
        );
        refused(
            &server,
            "/v1/derive",
            &json!({"operation": poisoned}),
            "invoice_id",
        );
        poisoned = op("R-189", "100");
        poisoned["run"] = json!({"run_id": "night\u{0}ly", "trigger": "scheduled", "attempt": 1});
        refused(
            &server,
            "/v1/begin",
            &json!({"operation": poisoned}),
            "run_id",
        );

        // A claim held, then a failure whose error holds a NUL.
        let begun = server.ok("/v1/begin", &json!({"operation": op("R-190", "100")}));
        let (key, fence) = (begun["key"].clone(), begun["fence"].clone());
        refused(
            &server,
            "/v1/fail",
            &json!({"key": key, "fence": fence, "retryable": true, "error": "card\u{0}declined"}),
            "error",
        );
        // A resolution's reason and resolver.
        for (member, reason, by) in [
            ("reason", "che\u{0}cked", "ana"),
            ("by", "checked", "a\u{0}na"),
        ] {
            refused(
                &server,
                "/v1/resolve",
                &json!({"key": key, "fence": fence, "resolution": "release", "reason": reason, "by": by}),
                member,
            );
        }
        refused(
            &server,
            "/v1/report",
            &json!({"run_id": "a\u{0}b"}),
            "run_id",
        );

        // (A report writes the answers queued for the attempt log first.)
        server.ok("/v1/report", &json!({}));
        // Nothing was claimed for the poisoned operations, and the claim
        // held is untouched: still in progress under its fence.
        let (rt, handle) = store.open();
        let records = rt
            .block_on(handle.records().list(ListFilter::default()))
            .unwrap();
        assert_eq!(records.len(), 1, "{records:?}");
        assert_eq!(records[0].record.state, RecordState::InProgress);
        assert_eq!(records[0].record.fence, fence.as_u64().unwrap());
        assert_eq!(store.events(), ["executed"], "{}", store.url);
        // And the sidecar serves on.
        server.ok(
            "/v1/complete",
            &json!({"key": key, "fence": fence, "body": "ok"}),
        );
    }
}
