//! The checks' shared vocabulary (keys, fingerprints, requests, holders,
//! the starting clock) and their assertion helpers.

use std::future::Future;
use std::time::Duration;

use super::Fixture;
use idem_store::{
    Claim, ClaimOutcome, ClaimRequest, Digest, Existing, Holder, KeptOperation, ManualClock,
    Membership, OwnershipToken, RecordKey, RecordState, RecordView, Resolution, ResolveRequest,
    Store, StoreError, StoreOptions,
};

/// The clock every check starts at (ms since the epoch).
pub const START_MS: u64 = 1_700_000_000_000;

/// The policy digest the checks claim under.
pub const POLICY: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

/// Record key `n` in namespace `conformance`.
pub fn key(n: u32) -> RecordKey {
    RecordKey::new(
        "conformance",
        Digest::of_bytes(format!("key-{n}").as_bytes()),
    )
}

/// Fingerprint `n`.
pub fn fingerprint(n: u32) -> Digest {
    Digest::of_bytes(format!("fingerprint-{n}").as_bytes())
}

/// A claim request with a lease and a retention, by worker `who`.
pub fn request(
    key: &RecordKey,
    fp: u32,
    lease_ms: u64,
    retention_ms: u64,
    who: u32,
) -> ClaimRequest {
    ClaimRequest {
        key: key.clone(),
        policy_digest: POLICY.to_string(),
        fingerprint: fingerprint(fp),
        partition: "customer-1".to_string(),
        lease: Duration::from_millis(lease_ms),
        retention: Duration::from_millis(retention_ms),
        holder: holder(who),
        // One business operation per key, as the engine computes it.
        operation_digest: Some(Digest::of_bytes(&key.digest.0)),
        operation: Some(KeptOperation::Kept(operation_of(key))),
        ownership: None,
        effect_atomic: false,
    }
}

/// The canonical operation the checks keep with `key`'s record.
pub fn operation_of(key: &RecordKey) -> String {
    format!(
        r#"{{"kind":"charge","tenant":"conformance","fields":{{"key":"{}"}}}}"#,
        key.digest
    )
}

/// A holder named after worker `who`.
pub fn holder(who: u32) -> Holder {
    Holder {
        run_id: Some(format!("run-{who}")),
        trigger: Some("scheduled".to_string()),
        attempt: Some(1),
        host: "conformance-host".to_string(),
        pid: 1000 + who,
        named: false,
        token: None,
    }
}

pub(super) fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Builds a store on a manual clock at [`START_MS`].
pub(super) async fn fixture<F, Fut>(factory: &F, max_outcome_bytes: usize) -> (Fixture, ManualClock)
where
    F: Fn(StoreOptions) -> Fut,
    Fut: Future<Output = Fixture>,
{
    let clock = ManualClock::new(START_MS);
    let fixture = factory(StoreOptions {
        clock: clock.store_clock(),
        max_outcome_bytes,
        ..StoreOptions::default()
    })
    .await;
    (fixture, clock)
}

pub(super) async fn claimed(store: &Store, request: ClaimRequest) -> Claim {
    match store.writes().claim(request).await {
        Ok(ClaimOutcome::Claimed(claim)) => claim,
        other => panic!("{}: expected Claimed, got {other:?}", store.describe()),
    }
}

pub(super) async fn existing(store: &Store, request: ClaimRequest) -> Existing {
    match store.writes().claim(request).await {
        Ok(ClaimOutcome::Existing(existing)) => *existing,
        other => panic!("{}: expected Existing, got {other:?}", store.describe()),
    }
}

pub(super) async fn view(store: &Store, key: &RecordKey) -> RecordView {
    match store.records().get(key).await {
        Ok(Some(view)) => view,
        other => panic!("{}: expected record {key}, got {other:?}", store.describe()),
    }
}

pub(super) fn assert_fenced<T: std::fmt::Debug>(
    result: Result<T, StoreError>,
    fence: u64,
    current: u64,
) {
    match result {
        Err(StoreError::Fenced {
            fence: f,
            current: c,
            ..
        }) if f == fence && c == current => {}
        other => panic!("expected Fenced {{ fence: {fence}, current: {current} }}, got {other:?}"),
    }
}

pub(super) fn assert_not_in_progress<T: std::fmt::Debug>(
    result: Result<T, StoreError>,
    state: RecordState,
) {
    match result {
        Err(StoreError::NotInProgress { state: s, .. }) if s == state => {}
        other => panic!("expected NotInProgress ({state:?}), got {other:?}"),
    }
}

pub(super) fn assert_not_eligible<T: std::fmt::Debug>(
    result: Result<T, StoreError>,
    state: RecordState,
) {
    match result {
        Err(StoreError::NotEligible { state: s, .. }) if s == state => {}
        other => panic!("expected NotEligible ({state:?}), got {other:?}"),
    }
}

pub(super) fn assert_gone<T: std::fmt::Debug>(result: Result<T, StoreError>) {
    match result {
        Err(StoreError::Gone { .. }) => {}
        other => panic!("expected Gone, got {other:?}"),
    }
}

pub(super) fn names(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

pub(super) async fn join(store: &Store, group: &str, members: &[&str]) -> Membership {
    store
        .ownership()
        .join_membership(group, &names(members))
        .await
        .unwrap_or_else(|e| panic!("{}: join {group}: {e}", store.describe()))
}

pub(super) fn token(group: &str, epoch: u64) -> OwnershipToken {
    OwnershipToken {
        group: group.to_string(),
        epoch,
    }
}

pub(super) fn owned(key: &RecordKey, lease_ms: u64, token: OwnershipToken) -> ClaimRequest {
    ClaimRequest {
        ownership: Some(token),
        ..request(key, 1, lease_ms, 60_000, 1)
    }
}

pub(super) fn assert_stale<T: std::fmt::Debug>(
    result: Result<T, StoreError>,
    epoch: u64,
    current: u64,
) {
    match result {
        Err(StoreError::StaleEpoch {
            epoch: e,
            current: c,
            ..
        }) if e == epoch && c == current => {}
        other => {
            panic!("expected StaleEpoch {{ epoch: {epoch}, current: {current} }}, got {other:?}")
        }
    }
}

/// A person's settlement of `key`, seen at `fence`.
pub(super) fn resolution(key: &RecordKey, fence: u64, resolution: Resolution) -> ResolveRequest {
    ResolveRequest {
        key: key.clone(),
        observed_fence: fence,
        resolution,
        by: "alice".into(),
        reason: "checked the provider: charge ch_1 exists".into(),
        holder: Holder {
            run_id: None,
            trigger: Some("manual".into()),
            attempt: None,
            host: "ops-host".into(),
            pid: 7,
            named: false,
            token: None,
        },
    }
}
