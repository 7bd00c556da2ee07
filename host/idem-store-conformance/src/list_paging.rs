//! A list read a page at a time by its place (keyset paging,
//! `ListFilter::after` and `before`): the pages, end to end, are the list
//! once, in its order, ties in the time of the last change broken by key;
//! a record added between two pages moves no row of the pages after; the
//! rows above a page are those the list has before it; a lookup by field
//! pages the same way.

use std::future::Future;
use std::time::Duration;

use super::Fixture;
use super::assert::{claimed, fixture, key, request};
use idem_store::{KeptOperation, ListCursor, ListFilter, RecordKey, Store, StoreOptions};

/// The keys `filter` lists, in order.
async fn keys(store: &Store, filter: ListFilter) -> Vec<RecordKey> {
    store
        .records()
        .list(filter)
        .await
        .expect("list")
        .into_iter()
        .map(|v| v.record.key)
        .collect()
}

/// Every page of `size` rows of `filter`, each read after the last row of
/// the one before.
async fn pages(store: &Store, filter: &ListFilter, size: u32) -> Vec<Vec<RecordKey>> {
    let mut out = Vec::new();
    let mut after = None;
    loop {
        let views = store
            .records()
            .list(ListFilter {
                limit: Some(size),
                after: after.clone(),
                ..filter.clone()
            })
            .await
            .expect("a page");
        if views.is_empty() {
            return out;
        }
        after = views.last().map(|v| ListCursor::of(&v.record));
        out.push(views.into_iter().map(|v| v.record.key).collect());
    }
}

/// Keyset paging lists every record once, in the list's order, whatever
/// is added meanwhile; see the module docs.
pub async fn a_list_pages_by_its_place<F, Fut>(factory: &F)
where
    F: Fn(StoreOptions) -> Fut,
    Fut: Future<Output = Fixture>,
{
    let (fx, clock) = fixture(factory, idem_store::DEFAULT_MAX_OUTCOME_BYTES).await;
    let store = &fx.store;
    let name = store.describe();
    // Records 1-7, each a millisecond after the last, but 3, 4 and 5 at one
    // time (their order is their keys'); each keeps an invoice field, and
    // the odd ones the customer c-1.
    for n in 1..=7u32 {
        let op = format!(
            r#"{{"kind":"charge","tenant":"acme","fields":{{"customer":"c-{}","invoice_id":"R-{n}"}}}}"#,
            n % 2
        );
        let request = idem_store::ClaimRequest {
            operation: Some(KeptOperation::Kept(op)),
            ..request(&key(n), 1, 60_000, 600_000, 1)
        };
        claimed(store, request).await;
        if !(3..5).contains(&n) {
            clock.advance(Duration::from_millis(1));
        }
    }
    let all = keys(store, ListFilter::default()).await;
    assert_eq!(all.len(), 7, "{name}");
    let paged = pages(store, &ListFilter::default(), 3).await;
    assert_eq!(
        paged.iter().map(Vec::len).collect::<Vec<_>>(),
        [3, 3, 1],
        "{name}: pages of three"
    );
    assert_eq!(paged.concat(), all, "{name}: the pages are the list");

    // A record added after the first page was read lists first: the next
    // page starts where the first ended, as before.
    let first = keys(
        store,
        ListFilter {
            limit: Some(3),
            ..ListFilter::default()
        },
    )
    .await;
    claimed(store, request(&key(8), 1, 60_000, 600_000, 1)).await;
    let listed = store
        .records()
        .list(ListFilter::default())
        .await
        .expect("list");
    assert_eq!(listed[0].record.key, key(8), "{name}: the new one first");
    let place = |k: &RecordKey| {
        let view = listed.iter().find(|v| v.record.key == *k).expect("listed");
        ListCursor::of(&view.record)
    };
    let second = keys(
        store,
        ListFilter {
            limit: Some(3),
            after: Some(place(&first[2])),
            ..ListFilter::default()
        },
    )
    .await;
    assert_eq!(second, all[3..6], "{name}: the second page moved not");

    // Above the second page: the rows the list has before it, the newest
    // included.
    let above = keys(
        store,
        ListFilter {
            before: Some(place(&first[2])),
            ..ListFilter::default()
        },
    )
    .await;
    let mut expected = vec![key(8)];
    expected.extend_from_slice(&first[..2]);
    assert_eq!(above, expected, "{name}: the rows above");

    // A lookup by field pages alike: the customer c-1 (records 1, 3, 5, 7),
    // two at a time.
    let customer = ListFilter {
        fields: vec![("customer".into(), "c-1".into())],
        ..ListFilter::default()
    };
    let found = keys(store, customer.clone()).await;
    assert_eq!(found.len(), 4, "{name}");
    let paged = pages(store, &customer, 2).await;
    assert_eq!(paged.len(), 2, "{name}: two pages of two");
    assert_eq!(paged.concat(), found, "{name}: a lookup's pages");
}
