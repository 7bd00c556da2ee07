//! The reference model of the record state machine, written
//! independently of the stores' code, and how a store's answers are checked
//! against it.

use std::collections::BTreeMap;

use super::KEYS;
use crate::key;
use idem_store::{ClaimOutcome, Outcome, Record, RecordState, StoreError};

/// The model's record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct MRecord {
    pub(super) state: RecordState,
    pub(super) fence: u64,
    pub(super) fp: u8,
    pub(super) lease_until: u64,
    pub(super) attempts: u32,
    pub(super) created: u64,
    pub(super) retention: u64,
    pub(super) retain_until: u64,
    pub(super) outcome: Option<Outcome>,
}

impl MRecord {
    pub(super) fn lease_live(&self, now: u64) -> bool {
        self.state == RecordState::InProgress && self.lease_until > now
    }

    pub(super) fn expired(&self, now: u64) -> bool {
        self.retain_until < now && !self.lease_live(now)
    }
}

/// What a worker remembers about a key.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Memory {
    /// The fence of the worker's own claim (kept after being deposed).
    pub(super) held: Option<u64>,
    /// The fence the worker last saw on the record.
    pub(super) observed: Option<u64>,
}

#[derive(Debug, Default)]
pub(super) struct Model {
    pub(super) records: BTreeMap<u8, MRecord>,
    pub(super) workers: Vec<[Memory; KEYS as usize]>,
    pub(super) max_fence: u64,
}

impl Model {
    pub(super) fn live(&self, k: u8, now: u64) -> Option<&MRecord> {
        self.records.get(&k).filter(|r| !r.expired(now))
    }
}

/// What the model expects of a write.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Expect {
    Ok,
    Gone,
    Fenced(u64),
    NotInProgress,
    NotEligible,
}

pub(super) fn kind<T>(result: &Result<T, StoreError>) -> Result<Expect, String> {
    match result {
        Ok(_) => Ok(Expect::Ok),
        Err(StoreError::Gone { .. }) => Ok(Expect::Gone),
        Err(StoreError::Fenced { current, .. }) => Ok(Expect::Fenced(*current)),
        Err(StoreError::NotInProgress { .. }) => Ok(Expect::NotInProgress),
        Err(StoreError::NotEligible { .. }) => Ok(Expect::NotEligible),
        Err(other) => Err(format!("unexpected store error: {other}")),
    }
}

/// The model's verdict on a write by a holder of `fence`.
pub(super) fn holder_write(model: &Model, k: u8, fence: u64, now: u64) -> Expect {
    match model.live(k, now) {
        None => Expect::Gone,
        Some(r) if r.fence != fence => Expect::Fenced(r.fence),
        Some(r) if r.state != RecordState::InProgress => Expect::NotInProgress,
        Some(_) => Expect::Ok,
    }
}

/// Checks one claim's answer against the model and applies it. A new
/// fence must exceed `fresh_above` (the highest fence before the call: a
/// batch draws its fences in an order of the store's choosing) and be
/// unused.
pub(super) fn expect_claim(
    model: &mut Model,
    step: usize,
    who: usize,
    (k, fp, lease_ms, retention_ms): (u8, u8, u64, u64),
    now: u64,
    fresh_above: u64,
    got: ClaimOutcome,
) -> Result<(), String> {
    match (model.live(k, now).cloned(), got) {
        (None, ClaimOutcome::Claimed(c)) => {
            ensure!(
                c.fence > fresh_above && !model.records.values().any(|r| r.fence == c.fence),
                "step {step}: fence {} is not new (fences before: up to {})",
                c.fence,
                fresh_above
            );
            ensure!(
                c.attempt == 1 && c.lease_until_ms == now + lease_ms,
                "step {step}: claim {c:?}"
            );
            model.max_fence = model.max_fence.max(c.fence);
            let lease_until = now + lease_ms;
            model.records.insert(
                k,
                MRecord {
                    state: RecordState::InProgress,
                    fence: c.fence,
                    fp,
                    lease_until,
                    attempts: 1,
                    created: now,
                    retention: retention_ms,
                    retain_until: (now + retention_ms).max(lease_until),
                    outcome: None,
                },
            );
            model.workers[who][usize::from(k)] = Memory {
                held: Some(c.fence),
                observed: Some(c.fence),
            };
        }
        (Some(r), ClaimOutcome::Existing(e)) => {
            let v = &e.view;
            ensure!(
                v.record.fence == r.fence
                    && v.record.state == r.state
                    && e.fingerprint_matches == (r.fp == fp)
                    && v.age_ms == now - r.created
                    && v.lease_remaining_ms
                        == if r.state == RecordState::InProgress {
                            r.lease_until.saturating_sub(now)
                        } else {
                            0
                        },
                "step {step}: existing {e:?} but the model has {r:?}"
            );
            model.workers[who][usize::from(k)].observed = Some(r.fence);
        }
        (expected, got) => {
            return Err(format!(
                "step {step}: model has {expected:?}, store answered {got:?}"
            ));
        }
    }
    Ok(())
}

pub(super) async fn snapshot(store: &idem_store::Store) -> Result<BTreeMap<u8, Record>, String> {
    let mut out = BTreeMap::new();
    for k in 0..KEYS {
        if let Some(v) = store
            .records()
            .get(&key(u32::from(k)))
            .await
            .map_err(|e| format!("get: {e}"))?
        {
            out.insert(k, v.record);
        }
    }
    Ok(out)
}
