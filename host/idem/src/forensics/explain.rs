//! Why what this process just ran had run before: the analysis a run's
//! summary prints (`idem run`), read from the store.

use std::collections::BTreeSet;

use idem_store::{AttemptFilter, Holder, Store, StoreError};

use super::{Analysis, analyse, review::timeline};

/// Entries read from the log per store call while looking for this
/// process's keys.
const PAGE: u32 = 10_000;

/// The analysis of the keys this process asked for since `since_ms` (in
/// `namespace`, or all) and was not the only one to ask for: each key's
/// whole timeline, at most `max_keys` keys (the first ones this process
/// asked for). The log since `since_ms` read a page at a time until
/// enough keys are found, then one read per key.
pub async fn explain_this_process(
    store: &Store,
    namespace: Option<&str>,
    since_ms: u64,
    max_keys: usize,
) -> Result<Analysis, StoreError> {
    explain_paged(store, namespace, since_ms, max_keys, PAGE).await
}

/// [`explain_this_process`], reading `page` entries per store call.
async fn explain_paged(
    store: &Store,
    namespace: Option<&str>,
    since_ms: u64,
    max_keys: usize,
    page_size: u32,
) -> Result<Analysis, StoreError> {
    let me = Holder::this_process();
    let mine = |e: &idem_store::AttemptEntry| {
        e.holder
            .as_ref()
            .is_some_and(|h| h.host == me.host && h.pid == me.pid)
    };
    // Keys where this process got something other than a fresh claim: a
    // replay, in progress, a take-over… — asked for before, or by another.
    // Read a page at a time: a run of millions leaves millions of entries,
    // and only the first `max_keys` keys are wanted.
    let mut keys = BTreeSet::new();
    let mut after_id = None;
    'pages: loop {
        let page = store
            .records()
            .attempts(AttemptFilter {
                namespace: namespace.map(str::to_string),
                since_ms: Some(since_ms),
                after_id,
                limit: Some(page_size),
                ..AttemptFilter::default()
            })
            .await?;
        for entry in page.iter().filter(|e| mine(e)) {
            if entry.event != idem_store::AttemptEvent::Executed && super::is_ask(entry) {
                keys.insert(entry.key.clone());
            }
            if keys.len() >= max_keys {
                break 'pages;
            }
        }
        match page.last() {
            Some(last) if page.len() == page_size as usize => after_id = Some(last.id),
            _ => break,
        }
    }
    let mut entries = Vec::new();
    for key in &keys {
        entries.extend(timeline(store, key).await?);
    }
    Ok(analyse(&entries))
}

#[cfg(test)]
mod tests {
    use idem_core::Digest;
    use idem_store::{
        AttemptEntry, AttemptEvent, ClaimOutcome, ClaimRequest, MemoryStore, RecordKey,
        StoreOptions,
    };

    use super::*;

    /// Two replays each for `keys` keys, answered to this process, and one
    /// for a key another process asked for; each key claimed first by
    /// that other process (an answer is logged about a stored record).
    async fn asked_twice(store: &Store, keys: u8) {
        let answer = |key: u8, holder: Holder| {
            let mut entry = AttemptEntry::new(
                RecordKey::new("ns", Digest([key; 32])),
                1,
                AttemptEvent::Replayed,
                1_000 + u64::from(key),
            );
            entry.holder = Some(holder);
            entry.policy_digest = Some("sha256:p".into());
            entry
        };
        let other = Holder {
            pid: Holder::this_process().pid.wrapping_add(1),
            ..Holder::this_process()
        };
        for key in (0..keys).chain([200]) {
            let claimed = store
                .writes()
                .claim(ClaimRequest {
                    key: RecordKey::new("ns", Digest([key; 32])),
                    policy_digest: format!("sha256:{}", "ab".repeat(32)),
                    fingerprint: Digest([key; 32]),
                    partition: "p".into(),
                    lease: std::time::Duration::from_secs(60),
                    retention: std::time::Duration::from_secs(3_600),
                    holder: other.clone(),
                    operation_digest: None,
                    operation: None,
                    ownership: None,
                    effect_atomic: false,
                })
                .await
                .unwrap();
            assert!(matches!(claimed, ClaimOutcome::Claimed(_)), "{claimed:?}");
        }
        let mut entries = vec![answer(200, other)];
        for key in 0..keys {
            entries.push(answer(key, Holder::this_process()));
            entries.push(answer(key, Holder::this_process()));
        }
        store.records().log_answers(entries).await.unwrap();
    }

    /// Read a page at a time, the analysis is the one a single read gives,
    /// and it stops at `max_keys` keys, the first ones asked for.
    #[tokio::test]
    async fn paging_through_the_log_finds_the_same_keys() {
        let store = Store::from(MemoryStore::new(StoreOptions::default()));
        asked_twice(&store, 7).await;
        let whole = explain_paged(&store, Some("ns"), 0, 100, 10_000)
            .await
            .unwrap();
        assert_eq!(whole.duplicates.len(), 7, "{whole:#?}");
        for page in [1, 2, 3, 14, 15] {
            let paged = explain_paged(&store, Some("ns"), 0, 100, page)
                .await
                .unwrap();
            assert_eq!(paged, whole, "pages of {page}");
        }
        let first = explain_paged(&store, Some("ns"), 0, 3, 2).await.unwrap();
        let keys: Vec<_> = first.duplicates.iter().map(|d| d.key.digest.0[0]).collect();
        assert_eq!(keys, vec![0, 1, 2]);
    }
}
