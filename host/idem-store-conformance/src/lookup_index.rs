//! A lookup by an operation's field (`idem inspect --field
//! invoice_id=R-189`, the console's search) finds the same records on
//! every store, whether the store reads them through an index
//! (PostgreSQL's GIN index over the kept operation) or scans (SQLite,
//! passing over operations without the value's text; the memory store):
//! the index keeps up with every write that makes, keeps, replaces or
//! collects a record's operation.

use std::future::Future;
use std::time::Duration;

use super::Fixture;
use super::assert::{claimed, fixture, key, ms, request};
use super::holder;
use idem_store::{
    ClaimRequest, Digest, KeptOperation, ListFilter, NotKept, Outcome, RecordKey, RecordState,
    Store, StoreOptions,
};

/// The operations of the check, by record (`None`: a claim that kept
/// none).
const OPERATIONS: [Option<&str>; 6] = [
    // 1 and 2: one amount as a number, the other as text.
    Some(
        r#"{"kind":"charge","tenant":"acme","fields":{"amount":150,"customer":"c-7","invoice_id":"R-1"}}"#,
    ),
    Some(
        r#"{"kind":"charge","tenant":"acme","fields":{"amount":"150","customer":"c-7","invoice_id":"R-2"}}"#,
    ),
    // 3 and 4: a decimal and a boolean, as JSON and as text.
    Some(
        r#"{"kind":"charge","tenant":"acme","fields":{"amount":1.5,"invoice_id":"R-3","paid":true}}"#,
    ),
    Some(
        r#"{"kind":"charge","tenant":"acme","fields":{"amount":"1.50","invoice_id":"R-4","paid":"true"}}"#,
    ),
    // 5: quotes, a backslash, SQL's wildcards and characters beyond ASCII,
    // in a value and in names.
    Some(
        r#"{"kind":"charge","tenant":"acme","fields":{"a.b":"x","bill \"to\"":"Zoë ☃ 𝄞","invoice_id":"it's 50% \"off\"_\\"}}"#,
    ),
    None,
];

/// A lookup: the fields asked for, the records expected (sorted), and
/// what the case shows.
type Case = (
    &'static [(&'static str, &'static str)],
    &'static [u32],
    &'static str,
);

/// The value of record 5's `invoice_id`, as the policy reads it.
const ODD: &str = r#"it's 50% "off"_\"#;

/// A claim of `key` keeping `operation`, held for `lease_ms` and kept
/// `retention_ms` after its last write.
fn claim(
    key: &RecordKey,
    operation: Option<KeptOperation>,
    lease_ms: u64,
    retention_ms: u64,
) -> ClaimRequest {
    ClaimRequest {
        operation,
        ..request(key, 1, lease_ms, retention_ms, 1)
    }
}

/// The numbers of the records `filter` lists (record `n` is `key(n)`; one
/// in namespace `other` is 100 + n), in the order listed.
async fn listed(store: &Store, filter: ListFilter) -> Vec<u32> {
    let views = store.records().list(filter).await.expect("list");
    views
        .iter()
        .map(|v| {
            (1..=20)
                .find_map(|n| {
                    if v.record.key == key(n) {
                        Some(n)
                    } else if v.record.key == other(n) {
                        Some(100 + n)
                    } else {
                        None
                    }
                })
                .expect("a key of this check")
        })
        .collect()
}

/// Record `n`'s key digest in namespace `other`.
fn other(n: u32) -> RecordKey {
    RecordKey::new("other", Digest::of_bytes(format!("key-{n}").as_bytes()))
}

/// A filter on `fields`.
fn by(fields: &[(&str, &str)]) -> ListFilter {
    ListFilter {
        fields: fields
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect(),
        ..ListFilter::default()
    }
}

/// Sorted, for the lookups whose order is not what is checked.
async fn found(store: &Store, filter: ListFilter) -> Vec<u32> {
    let mut found = listed(store, filter).await;
    found.sort_unstable();
    found
}

/// Exactly the records whose kept operation has every field asked for,
/// spelt as the policy reads it: a number and the text of its canonical
/// spelling alike, `1.5` not `1.50`, `true` as a boolean or as text; odd
/// characters as written, SQL's wildcards as themselves; namespaces apart;
/// a record that kept no operation never. The lookup keeps up with an end,
/// a take-over, gc, a key claimed again after gc with another operation,
/// and one claimed again while expired (replaced in place); the limit
/// keeps the most recently updated.
pub async fn a_lookup_by_field_is_the_same_on_every_store<F, Fut>(factory: &F)
where
    F: Fn(StoreOptions) -> Fut,
    Fut: Future<Output = Fixture>,
{
    let (fx, clock) = fixture(factory, idem_store::DEFAULT_MAX_OUTCOME_BYTES).await;
    let store = &fx.store;
    let name = store.describe();
    let tick = || clock.advance(Duration::from_millis(1));
    let mut fences = Vec::new();
    for (n, operation) in OPERATIONS.iter().enumerate() {
        let k = key(n as u32 + 1);
        let kept = operation.map(|o| KeptOperation::Kept(o.to_string()));
        fences.push(claimed(store, claim(&k, kept, 1_000, 600_000)).await.fence);
        tick();
    }
    // 7: kept none, by the policy's word; 101: record 1's operation under
    // record 1's digest, in another namespace.
    let off = Some(KeptOperation::NotKept(NotKept::OffByPolicy));
    claimed(store, claim(&key(7), off, 1_000, 600_000)).await;
    tick();
    let first = OPERATIONS[0].map(|o| KeptOperation::Kept(o.to_string()));
    claimed(store, claim(&other(1), first, 1_000, 600_000)).await;
    tick();

    let cases: [Case; 15] = [
        (
            &[("invoice_id", "R-1")],
            &[1, 101],
            "one value, two namespaces",
        ),
        (&[("amount", "150")], &[1, 2, 101], "a number and its text"),
        (&[("amount", "1.5")], &[3], "a decimal"),
        (
            &[("amount", "1.50")],
            &[4],
            "a decimal's other spelling is text",
        ),
        (&[("paid", "true")], &[3, 4], "a boolean and its text"),
        (
            &[("customer", "c-7"), ("amount", "150")],
            &[1, 2, 101],
            "two fields",
        ),
        (
            &[("customer", "c-7"), ("invoice_id", "R-2")],
            &[2],
            "two fields, one record",
        ),
        (
            &[("invoice_id", "R-2"), ("customer", "c-7")],
            &[2],
            "in either order",
        ),
        (
            &[("invoice_id", "R-2"), ("customer", "c-8")],
            &[],
            "one field differs",
        ),
        (
            &[("invoice_id", ODD)],
            &[5],
            "quotes, a backslash, wildcards",
        ),
        (
            &[("bill \"to\"", "Zoë ☃ 𝄞")],
            &[5],
            "a name with quotes, beyond ASCII",
        ),
        (&[("a.b", "x")], &[5], "a name with a dot"),
        (
            &[("invoice_id", "it's 50% _off_")],
            &[],
            "wildcards are not wild",
        ),
        (&[("invoice_id", "R-")], &[], "a part of a value"),
        (&[("R-1", "invoice_id")], &[], "name and value swapped"),
    ];
    let check = async |when: &str| {
        for (fields, expect, what) in cases {
            assert_eq!(
                found(store, by(fields)).await,
                expect,
                "{name}: {what} ({when})"
            );
        }
        let conformance = ListFilter {
            namespace: Some("conformance".into()),
            ..by(&[("invoice_id", "R-1")])
        };
        assert_eq!(
            found(store, conformance).await,
            [1],
            "{name}: one namespace ({when})"
        );
    };
    check("claimed").await;

    // An end and a retry's take-over keep the operation: found once, not
    // twice.
    store
        .writes()
        .complete(&key(1), fences[0], Outcome::new(0, "ok"))
        .await
        .expect("complete");
    tick();
    store
        .writes()
        .fail(&key(2), fences[1], true, Outcome::error(1, "try again"))
        .await
        .expect("fail");
    tick();
    store
        .records()
        .take_over(&key(2), fences[1], ms(1_000), holder(2), None)
        .await
        .expect("take over");
    tick();
    check("after an end and a retry").await;
    let completed = ListFilter {
        state: Some(RecordState::Completed),
        ..by(&[("amount", "150")])
    };
    assert_eq!(found(store, completed).await, [1], "{name}: with a state");
    // Most recently updated first: record 2 (taken over), then 1, then 101.
    let limited = ListFilter {
        limit: Some(2),
        ..by(&[("amount", "150")])
    };
    assert_eq!(listed(store, limited).await, [2, 1], "{name}: a limit");

    // Record 8 lives briefly; once collected it is found no more, and its
    // key claimed again with another operation is found by the new one.
    let short = |invoice: &str| {
        let op =
            format!(r#"{{"kind":"charge","tenant":"acme","fields":{{"invoice_id":"{invoice}"}}}}"#);
        claim(&key(8), Some(KeptOperation::Kept(op)), 1_000, 1_000)
    };
    let eight = claimed(store, short("R-8")).await;
    store
        .writes()
        .complete(&key(8), eight.fence, Outcome::new(0, "ok"))
        .await
        .expect("complete");
    assert_eq!(
        found(store, by(&[("invoice_id", "R-8")])).await,
        [8],
        "{name}: before gc"
    );
    clock.advance(Duration::from_millis(5_000));
    assert_eq!(
        found(store, by(&[("invoice_id", "R-8")])).await,
        [] as [u32; 0],
        "{name}: expired"
    );
    assert!(store.records().gc().await.expect("gc") >= 1, "{name}: gc");
    claimed(store, short("R-8b")).await;
    assert_eq!(
        found(store, by(&[("invoice_id", "R-8")])).await,
        [] as [u32; 0],
        "{name}: collected"
    );
    assert_eq!(
        found(store, by(&[("invoice_id", "R-8b")])).await,
        [8],
        "{name}: claimed again after gc"
    );

    // Record 9 expires and its key is claimed again before any gc, with
    // another operation: the record is replaced where it stands, and found
    // by its new operation only.
    let nine = |invoice: &str| {
        let op =
            format!(r#"{{"kind":"charge","tenant":"acme","fields":{{"invoice_id":"{invoice}"}}}}"#);
        claim(&key(9), Some(KeptOperation::Kept(op)), 1_000, 1_000)
    };
    let ninth = claimed(store, nine("R-9")).await;
    store
        .writes()
        .complete(&key(9), ninth.fence, Outcome::new(0, "ok"))
        .await
        .expect("complete");
    assert_eq!(
        found(store, by(&[("invoice_id", "R-9")])).await,
        [9],
        "{name}: before it expired"
    );
    clock.advance(Duration::from_millis(5_000));
    claimed(store, nine("R-9b")).await;
    assert_eq!(
        found(store, by(&[("invoice_id", "R-9")])).await,
        [] as [u32; 0],
        "{name}: replaced in place"
    );
    assert_eq!(
        found(store, by(&[("invoice_id", "R-9b")])).await,
        [9],
        "{name}: found by the operation that replaced it"
    );
}
