//! Remembered evaluations.
//!
//! A policy is a pure function of its input: it has no imports (no clock,
//! no randomness, no I/O), NaNs are canonicalised and fuel is counted
//! deterministically, so the same input always yields the same output at
//! the same cost. A memo keyed by the exact input the guest would receive
//! (as the contract's types, after canonicalisation and with the logical
//! time filled in) may therefore answer instead of the guest. Only
//! successful evaluations are remembered: a failure (deadline, trap) is
//! evaluated again, since a deadline depends on the machine's speed.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use idem_core::{Decision, Derivation, PolicyError};

use super::Evaluated;
use super::convert::wit::exports::idem::policy::policy as p;

/// What one input evaluated to.
pub(super) type DeriveResult = Evaluated<Result<Derivation, PolicyError>>;

/// Remembered evaluations of one policy, at most `capacity` of each kind.
pub(super) struct Memo {
    capacity: usize,
    derive: Mutex<HashMap<p::Operation, DeriveResult>>,
    duplicate: Mutex<HashMap<p::DuplicateContext, Evaluated<Decision>>>,
    hits: AtomicU64,
    misses: AtomicU64,
}

/// How often a memo answered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemoStats {
    /// Evaluations answered from memory.
    pub hits: u64,
    /// Evaluations the guest ran (successful or not).
    pub misses: u64,
}

impl Memo {
    pub(super) fn new(capacity: usize) -> Self {
        Memo {
            capacity,
            derive: Mutex::default(),
            duplicate: Mutex::default(),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    pub(super) fn stats(&self) -> MemoStats {
        MemoStats {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
        }
    }

    /// Counts a lookup's result.
    fn counted<T>(&self, found: Option<T>) -> Option<T> {
        let counter = if found.is_some() {
            &self.hits
        } else {
            &self.misses
        };
        counter.fetch_add(1, Ordering::Relaxed);
        found
    }

    pub(super) fn derived(&self, input: &p::Operation) -> Option<DeriveResult> {
        self.counted(lock(&self.derive).get(input).cloned())
    }

    pub(super) fn remember_derived(&self, input: p::Operation, result: &DeriveResult) {
        insert(&self.derive, self.capacity, input, result.clone());
    }

    pub(super) fn decided(&self, input: &p::DuplicateContext) -> Option<Evaluated<Decision>> {
        self.counted(lock(&self.duplicate).get(input).cloned())
    }

    pub(super) fn remember_decided(
        &self,
        input: p::DuplicateContext,
        result: &Evaluated<Decision>,
    ) {
        insert(&self.duplicate, self.capacity, input, result.clone());
    }
}

/// A poisoned memo is still a valid memo: entries are inserted whole.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Inserts, forgetting everything first when full: bounded memory without
/// bookkeeping per entry (a memo serves bursts of repeated inputs, such as
/// one schedule replayed on several stores).
fn insert<K: std::hash::Hash + Eq, V>(
    map: &Mutex<HashMap<K, V>>,
    capacity: usize,
    key: K,
    value: V,
) {
    if capacity == 0 {
        return;
    }
    let mut map = lock(map);
    if map.len() >= capacity {
        map.clear();
    }
    map.insert(key, value);
}
