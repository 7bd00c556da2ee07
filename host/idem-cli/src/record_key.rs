//! A record named on the command line: all 64 hex characters of its key or
//! a prefix of them (`idem inspect` shows 16), optionally behind its
//! namespace (`billing/7ac249ec…`, as reports print keys).

use idem_store::{ListFilter, RecordView, Store};

use crate::exit::{Failure, INCOMPLETE};

/// `KEY` or `NAMESPACE/KEY`, checked: the namespace (if any) and the
/// lower-case hex prefix.
pub fn parse(text: &str) -> Result<(Option<String>, String), Failure> {
    let (namespace, hex) = match text.rsplit_once('/') {
        Some((ns, hex)) if !ns.is_empty() => (Some(ns.to_string()), hex),
        _ => (None, text),
    };
    let prefix = hex.to_ascii_lowercase();
    if prefix.is_empty() || prefix.len() > 64 || !prefix.bytes().all(|b| b.is_ascii_hexdigit()) {
        let shown: String = text.chars().take(80).collect();
        return Err(Failure::input(format!(
            "`{shown}` is not a key: a key is 64 hex characters (or a prefix of them that names one record), optionally as NAMESPACE/KEY"
        )));
    }
    Ok((namespace, prefix))
}

/// The one live record `text` names (in `namespace` when given), or an
/// error saying there is none or which several it could be.
pub async fn find(
    store: &Store,
    text: &str,
    namespace: Option<&str>,
    shown_store: &str,
) -> Result<RecordView, Failure> {
    let (in_key, prefix) = parse(text)?;
    let namespace = in_key.as_deref().or(namespace);
    let views = store
        .records()
        .list(ListFilter {
            namespace: namespace.map(str::to_string),
            ..ListFilter::default()
        })
        .await
        .map_err(|e| Failure::input(format!("cannot read {shown_store}: {e}")))?;
    let mut matching: Vec<RecordView> = views
        .into_iter()
        .filter(|v| v.record.key.digest.to_hex().starts_with(&prefix))
        .collect();
    match matching.len() {
        0 => Err(Failure {
            code: INCOMPLETE,
            message: format!("no record with key {text} in {shown_store}"),
        }),
        1 => Ok(matching.remove(0)),
        n => {
            let keys: Vec<String> = matching.iter().map(|v| v.record.key.to_string()).collect();
            Err(Failure::input(format!(
                "{n} records have keys starting with {prefix}; give more of the key: {}",
                keys.join(", ")
            )))
        }
    }
}
