//! Why what this process just ran had run before: the analysis a run's
//! summary prints (`idem run`), read from the store.

use std::collections::BTreeSet;

use idem_store::{AttemptFilter, Holder, Store, StoreError};

use super::{Analysis, analyse, review::timeline};

/// The analysis of the keys this process asked for since `since_ms` (in
/// `namespace`, or all) and was not the only one to ask for: each key's
/// whole timeline, at most `max_keys` keys (the first ones this process
/// asked for). One read of the log since `since_ms`, then one per key.
pub async fn explain_this_process(
    store: &dyn Store,
    namespace: Option<&str>,
    since_ms: u64,
    max_keys: usize,
) -> Result<Analysis, StoreError> {
    let me = Holder::this_process();
    let recent = store
        .attempts(AttemptFilter {
            namespace: namespace.map(str::to_string),
            since_ms: Some(since_ms),
            ..AttemptFilter::default()
        })
        .await?;
    let mine = |e: &idem_store::AttemptEntry| {
        e.holder
            .as_ref()
            .is_some_and(|h| h.host == me.host && h.pid == me.pid)
    };
    // Keys where this process got something other than a fresh claim: a
    // replay, in progress, a take-over… — asked for before, or by another.
    let mut keys = BTreeSet::new();
    for entry in recent.iter().filter(|e| mine(e)) {
        if entry.event != idem_store::AttemptEvent::Executed && super::is_ask(entry) {
            keys.insert(entry.key.clone());
        }
        if keys.len() >= max_keys {
            break;
        }
    }
    let mut entries = Vec::new();
    for key in &keys {
        entries.extend(timeline(store, key).await?);
    }
    Ok(analyse(&entries))
}
