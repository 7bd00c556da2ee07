//! A model-based property test: random interleavings of claims, writes,
//! take-overs, clock advances, crashes and gc by 2 to 8 workers on a few
//! keys, run against a store and against a small reference model of the
//! record state machine, written independently of the stores' code.
//!
//! After every step the store's records must equal the model's, and:
//! - fences strictly increase, store-wide;
//! - at most one worker holds the current claim of a key;
//! - a completed record never changes (until its retention passes);
//! - a refused (fenced, ineligible...) call changes nothing.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

use crate::{Fixture, START_MS, fingerprint, holder, key, request};
use idem_store::{Ending, Finish, ManualClock, Outcome, Record, RecordState, Store, StoreOptions};

/// Returns the formatted divergence from a check unless `cond` holds.
macro_rules! ensure {
    ($cond:expr, $($msg:tt)+) => {
        if !$cond {
            return Err(format!($($msg)+));
        }
    };
}

mod reference;

use reference::{Expect, Memory, Model, expect_claim, holder_write, kind, snapshot};

/// Keys the workers fight over.
const KEYS: u8 = 3;

/// One step of a history.
///
/// Fields: `worker` and `key` are indices (the worker index wraps around the
/// history's worker count); `fp` picks one of two fingerprints; `lease_ms`,
/// `retention_ms` and `ms` are store-clock durations; `retryable` chooses
/// failed-retryable over failed-permanent.
#[derive(Debug, Clone)]
#[allow(missing_docs)] // The fields are documented above, once.
pub enum Op {
    /// A worker claims a key (with a fingerprint, lease and retention).
    Claim {
        worker: u8,
        key: u8,
        fp: u8,
        lease_ms: u64,
        retention_ms: u64,
    },
    /// A worker claims several keys in one `claim_many` call: `(key, fp,
    /// lease_ms, retention_ms)` each, keys possibly repeated.
    ClaimMany {
        worker: u8,
        claims: Vec<(u8, u8, u64, u64)>,
    },
    /// A worker completes the key with the fence it holds.
    Complete { worker: u8, key: u8 },
    /// A worker fails the key with the fence it holds.
    Fail {
        worker: u8,
        key: u8,
        retryable: bool,
    },
    /// A worker ends several attempts in one `finish_many` call: `(key,
    /// how)` each, how 0 complete, 1 fail retryable, 2 fail permanently;
    /// keys possibly repeated.
    FinishMany { worker: u8, finishes: Vec<(u8, u8)> },
    /// A worker extends its lease.
    Heartbeat { worker: u8, key: u8, lease_ms: u64 },
    /// A worker takes over the record it last observed.
    TakeOver { worker: u8, key: u8, lease_ms: u64 },
    /// A worker marks the record it last observed outcome-unknown.
    MarkUnknown { worker: u8, key: u8 },
    /// The store clock moves.
    Advance { ms: u64 },
    /// A worker crashes: it forgets its claims and observations.
    Crash { worker: u8 },
    /// Garbage collection.
    Gc,
}

fn op() -> impl Strategy<Value = Op> {
    let worker = 0u8..8;
    let k = 0u8..KEYS;
    let lease = prop::sample::select(vec![1u64, 50, 200, 1_000]);
    let retention = prop::sample::select(vec![0u64, 100, 1_000, 10_000]);
    prop_oneof![
        4 => (worker.clone(), k.clone(), 0u8..2, lease.clone(), retention.clone())
            .prop_map(|(worker, key, fp, lease_ms, retention_ms)| Op::Claim { worker, key, fp, lease_ms, retention_ms }),
        2 => (worker.clone(), prop::collection::vec((k.clone(), 0u8..2, lease.clone(), retention.clone()), 0..5))
            .prop_map(|(worker, claims)| Op::ClaimMany { worker, claims }),
        2 => (worker.clone(), k.clone()).prop_map(|(worker, key)| Op::Complete { worker, key }),
        2 => (worker.clone(), k.clone(), any::<bool>()).prop_map(|(worker, key, retryable)| Op::Fail { worker, key, retryable }),
        2 => (worker.clone(), prop::collection::vec((k.clone(), 0u8..3), 0..5))
            .prop_map(|(worker, finishes)| Op::FinishMany { worker, finishes }),
        1 => (worker.clone(), k.clone(), lease.clone()).prop_map(|(worker, key, lease_ms)| Op::Heartbeat { worker, key, lease_ms }),
        3 => (worker.clone(), k.clone(), lease).prop_map(|(worker, key, lease_ms)| Op::TakeOver { worker, key, lease_ms }),
        1 => (worker.clone(), k).prop_map(|(worker, key)| Op::MarkUnknown { worker, key }),
        3 => prop::sample::select(vec![1u64, 10, 100, 500, 1_000, 5_000]).prop_map(|ms| Op::Advance { ms }),
        1 => worker.prop_map(|worker| Op::Crash { worker }),
        1 => Just(Op::Gc),
    ]
}

/// The strategy of whole histories: a worker count and a list of steps.
pub fn histories() -> impl Strategy<Value = (usize, Vec<Op>)> {
    (2usize..=8, prop::collection::vec(op(), 1..48))
}

/// Runs one history against a fresh store; `Err` describes the first
/// divergence from the model.
///
/// With `connection_per_worker` (and a factory whose fixtures can reopen),
/// each worker talks to the store through a connection of its own, as
/// separate processes would.
pub async fn run_history<F, Fut>(
    factory: &F,
    workers: usize,
    ops: &[Op],
    connection_per_worker: bool,
) -> Result<(), String>
where
    F: Fn(StoreOptions) -> Fut,
    Fut: Future<Output = Fixture>,
{
    let clock = ManualClock::new(START_MS);
    let fx = factory(StoreOptions {
        clock: clock.store_clock(),
        ..StoreOptions::default()
    })
    .await;
    let store = &fx.store;
    let mut stores: Vec<Store> = Vec::with_capacity(workers);
    for _ in 0..workers {
        stores.push(match (&fx.reopen, connection_per_worker) {
            (Some(reopen), true) => reopen().await,
            _ => fx.store.clone(),
        });
    }
    let mut model = Model {
        workers: vec![[Memory::default(); KEYS as usize]; workers],
        ..Model::default()
    };
    // Completed records as first seen, by key: they must never change.
    let mut finals: BTreeMap<u8, Record> = BTreeMap::new();
    let mut before = snapshot(store).await?;

    for (step, op) in ops.iter().enumerate() {
        let now = clock.now_ms();
        let w = |worker: u8| usize::from(worker) % workers;
        let refused = match op.clone() {
            Op::Claim {
                worker,
                key: k,
                fp,
                lease_ms,
                retention_ms,
            } => {
                let who = w(worker);
                let req = request(
                    &key(u32::from(k)),
                    u32::from(fp),
                    lease_ms,
                    retention_ms,
                    who as u32,
                );
                let got = store
                    .writes()
                    .claim(req)
                    .await
                    .map_err(|e| format!("step {step}: claim: {e}"))?;
                let fresh_above = model.max_fence;
                expect_claim(
                    &mut model,
                    step,
                    who,
                    (k, fp, lease_ms, retention_ms),
                    now,
                    fresh_above,
                    got,
                )?;
                false
            }
            Op::ClaimMany { worker, claims } => {
                let who = w(worker);
                let requests = claims
                    .iter()
                    .map(|&(k, fp, lease_ms, retention_ms)| {
                        request(
                            &key(u32::from(k)),
                            u32::from(fp),
                            lease_ms,
                            retention_ms,
                            who as u32,
                        )
                    })
                    .collect();
                let got = store
                    .writes()
                    .claim_many(requests)
                    .await
                    .map_err(|e| format!("step {step}: claim_many: {e}"))?;
                ensure!(
                    got.len() == claims.len(),
                    "step {step}: {} outcomes for {} claims",
                    got.len(),
                    claims.len()
                );
                let fresh_above = model.max_fence;
                for (claim, outcome) in claims.into_iter().zip(got) {
                    let outcome =
                        outcome.map_err(|e| format!("step {step}: a claim of the batch: {e}"))?;
                    expect_claim(&mut model, step, who, claim, now, fresh_above, outcome)?;
                }
                false
            }
            Op::Complete { worker, key: k } | Op::Fail { worker, key: k, .. } => {
                let who = w(worker);
                let mem = model.workers[who][usize::from(k)];
                // A worker without a claim tries the fence it saw: a
                // non-holder's write must be refused too.
                let fence = mem.held.or(mem.observed).unwrap_or(1);
                let outcome =
                    Outcome::new(who as i32, format!("w{who} f{fence} s{step}").into_bytes());
                let (result, state) = match op {
                    Op::Fail { retryable, .. } => {
                        let to = if *retryable {
                            RecordState::FailedRetryable
                        } else {
                            RecordState::FailedPermanent
                        };
                        (
                            store
                                .writes()
                                .fail(&key(u32::from(k)), fence, *retryable, outcome.clone())
                                .await,
                            to,
                        )
                    }
                    _ => (
                        store
                            .writes()
                            .complete(&key(u32::from(k)), fence, outcome.clone())
                            .await,
                        RecordState::Completed,
                    ),
                };
                let expected = holder_write(&model, k, fence, now);
                let got = kind(&result).map_err(|e| format!("step {step}: {e}"))?;
                ensure!(
                    got == expected,
                    "step {step}: {op:?} with fence {fence}: expected {expected:?}, got {result:?}"
                );
                if got == Expect::Ok
                    && let Some(r) = model.records.get_mut(&k)
                {
                    r.state = state;
                    r.outcome = Some(outcome);
                    r.retain_until = now + r.retention;
                }
                got != Expect::Ok
            }
            Op::FinishMany { worker, finishes } => {
                let who = w(worker);
                let planned: Vec<(u8, u64, Ending, Outcome)> = finishes
                    .iter()
                    .enumerate()
                    .map(|(i, &(k, how))| {
                        let mem = model.workers[who][usize::from(k)];
                        let fence = mem.held.or(mem.observed).unwrap_or(1);
                        let ending = match how {
                            0 => Ending::Completed,
                            n => Ending::Failed { retryable: n == 1 },
                        };
                        let body = format!("w{who} f{fence} s{step} #{i}").into_bytes();
                        (k, fence, ending, Outcome::new(who as i32, body))
                    })
                    .collect();
                let got = store
                    .writes()
                    .finish_many(
                        planned
                            .iter()
                            .map(|(k, fence, ending, outcome)| Finish {
                                key: key(u32::from(*k)),
                                fence: *fence,
                                ending: *ending,
                                outcome: outcome.clone(),
                            })
                            .collect(),
                    )
                    .await
                    .map_err(|e| format!("step {step}: finish_many: {e}"))?;
                ensure!(
                    got.len() == planned.len(),
                    "step {step}: {} results for {} finishes",
                    got.len(),
                    planned.len()
                );
                // As if one after the other: each sees what the earlier
                // ones of the batch wrote.
                let mut all_refused = true;
                for ((k, fence, ending, outcome), result) in planned.into_iter().zip(got) {
                    let expected = holder_write(&model, k, fence, now);
                    let kind_got = kind(&result).map_err(|e| format!("step {step}: {e}"))?;
                    ensure!(
                        kind_got == expected,
                        "step {step}: {ending:?} of key {k} with fence {fence} in a batch: expected {expected:?}, got {result:?}"
                    );
                    if kind_got == Expect::Ok {
                        all_refused = false;
                        if let Some(r) = model.records.get_mut(&k) {
                            r.state = ending.state();
                            r.outcome = Some(outcome);
                            r.retain_until = now + r.retention;
                        }
                    }
                }
                all_refused
            }
            Op::Heartbeat {
                worker,
                key: k,
                lease_ms,
            } => {
                let who = w(worker);
                let mem = model.workers[who][usize::from(k)];
                let fence = mem.held.or(mem.observed).unwrap_or(1);
                let result = store
                    .records()
                    .heartbeat(&key(u32::from(k)), fence, Duration::from_millis(lease_ms))
                    .await;
                let expected = holder_write(&model, k, fence, now);
                let got = kind(&result).map_err(|e| format!("step {step}: {e}"))?;
                ensure!(
                    got == expected,
                    "step {step}: heartbeat with fence {fence}: expected {expected:?}, got {result:?}"
                );
                if let (Ok(until), Some(r)) = (&result, model.records.get_mut(&k)) {
                    ensure!(
                        *until == now + lease_ms,
                        "step {step}: heartbeat returned {until}"
                    );
                    r.lease_until = now + lease_ms;
                    r.retain_until = r.retain_until.max(r.lease_until);
                }
                got != Expect::Ok
            }
            Op::TakeOver {
                worker,
                key: k,
                lease_ms,
            } => {
                let who = w(worker);
                let mem = model.workers[who][usize::from(k)];
                let observed = mem.observed.or(mem.held).unwrap_or(1);
                let result = store
                    .records()
                    .take_over(
                        &key(u32::from(k)),
                        observed,
                        Duration::from_millis(lease_ms),
                        holder(who as u32),
                        None,
                    )
                    .await;
                let expected = match model.live(k, now) {
                    None => Expect::Gone,
                    Some(r) if r.fence != observed => Expect::Fenced(r.fence),
                    Some(r)
                        if matches!(
                            r.state,
                            RecordState::FailedRetryable | RecordState::OutcomeUnknown
                        ) || (r.state == RecordState::InProgress && r.lease_until <= now) =>
                    {
                        Expect::Ok
                    }
                    Some(_) => Expect::NotEligible,
                };
                let got = kind(&result).map_err(|e| format!("step {step}: {e}"))?;
                ensure!(
                    got == expected,
                    "step {step}: take-over of fence {observed}: expected {expected:?}, got {result:?}"
                );
                if let (Ok(c), Some(r)) = (&result, model.records.get_mut(&k)) {
                    ensure!(
                        c.fence > model.max_fence,
                        "step {step}: fence {} after {}",
                        c.fence,
                        model.max_fence
                    );
                    ensure!(
                        c.attempt == r.attempts + 1,
                        "step {step}: attempt {} after {}",
                        c.attempt,
                        r.attempts
                    );
                    model.max_fence = c.fence;
                    r.state = RecordState::InProgress;
                    r.fence = c.fence;
                    r.attempts += 1;
                    r.lease_until = now + lease_ms;
                    r.retain_until = (now + r.retention).max(r.lease_until);
                    r.outcome = None;
                    model.workers[who][usize::from(k)] = Memory {
                        held: Some(c.fence),
                        observed: Some(c.fence),
                    };
                }
                if let Expect::Fenced(current) = got {
                    model.workers[who][usize::from(k)].observed = Some(current);
                }
                got != Expect::Ok
            }
            Op::MarkUnknown { worker, key: k } => {
                let who = w(worker);
                let mem = model.workers[who][usize::from(k)];
                let observed = mem.observed.or(mem.held).unwrap_or(1);
                let result = stores[who]
                    .records()
                    .mark_unknown(&key(u32::from(k)), observed)
                    .await;
                let expected = match model.live(k, now) {
                    None => Expect::Gone,
                    Some(r) if r.fence != observed => Expect::Fenced(r.fence),
                    Some(r) if r.state == RecordState::OutcomeUnknown => Expect::Ok,
                    Some(r) if r.state == RecordState::InProgress && r.lease_until <= now => {
                        Expect::Ok
                    }
                    Some(_) => Expect::NotEligible,
                };
                let got = kind(&result).map_err(|e| format!("step {step}: {e}"))?;
                ensure!(
                    got == expected,
                    "step {step}: mark-unknown of fence {observed}: expected {expected:?}, got {result:?}"
                );
                if got == Expect::Ok
                    && let Some(r) = model.records.get_mut(&k)
                    && r.state == RecordState::InProgress
                {
                    r.state = RecordState::OutcomeUnknown;
                    r.retain_until = now + r.retention;
                }
                got != Expect::Ok
            }
            Op::Advance { ms } => {
                clock.advance(Duration::from_millis(ms));
                false
            }
            Op::Crash { worker } => {
                model.workers[w(worker)] = [Memory::default(); KEYS as usize];
                false
            }
            Op::Gc => {
                let removed = store
                    .records()
                    .gc()
                    .await
                    .map_err(|e| format!("step {step}: gc: {e}"))?;
                let expected = model.records.values().filter(|r| r.expired(now)).count() as u64;
                ensure!(
                    removed == expected,
                    "step {step}: gc removed {removed}, the model expected {expected}"
                );
                model.records.retain(|_, r| !r.expired(now));
                false
            }
        };

        // The store agrees with the model.
        let now = clock.now_ms();
        let after = snapshot(store)
            .await
            .map_err(|e| format!("step {step}: {e}"))?;
        for k in 0..KEYS {
            let got = after.get(&k);
            match (model.live(k, now), got) {
                (None, None) => {}
                (Some(m), Some(r)) => {
                    let same = r.state == m.state
                        && r.fence == m.fence
                        && r.fingerprint == fingerprint(u32::from(m.fp))
                        && r.lease_until_ms == m.lease_until
                        && r.attempts == m.attempts
                        && r.created_ms == m.created
                        && r.retain_until_ms == m.retain_until
                        && r.outcome == m.outcome
                        && r.key == key(u32::from(k));
                    ensure!(
                        same,
                        "step {step} ({op:?}): key {k}: store has {r:?}, model has {m:?}"
                    );
                }
                (m, r) => {
                    return Err(format!(
                        "step {step} ({op:?}): key {k}: store has {r:?}, model has {m:?}"
                    ));
                }
            }
            // A completed record never changes while it lives.
            match (finals.get(&k), got) {
                (Some(first), Some(r)) if r.fence == first.fence => {
                    ensure!(
                        r == first,
                        "step {step}: completed record {k} changed from {first:?} to {r:?}"
                    );
                }
                _ => {
                    finals.remove(&k);
                    if let Some(r) = got.filter(|r| r.state == RecordState::Completed) {
                        finals.insert(k, r.clone());
                    }
                }
            }
            // At most one worker holds the current claim.
            if let Some(r) = got.filter(|r| r.state == RecordState::InProgress) {
                let holders = model
                    .workers
                    .iter()
                    .filter(|m| m[usize::from(k)].held == Some(r.fence))
                    .count();
                ensure!(
                    holders <= 1,
                    "step {step}: {holders} workers hold fence {} of key {k}",
                    r.fence
                );
            }
        }
        // A refused call changes nothing (the clock moved nowhere).
        if refused {
            ensure!(
                after == before,
                "step {step}: refused {op:?} changed the store: {before:?} -> {after:?}"
            );
        }
        before = after;
    }
    Ok(())
}

/// Runs `cases` random histories against stores from `factory`, shrinking
/// a failure to a minimal history. Must not be called from inside a tokio
/// runtime (it runs its own).
pub fn check<F, Fut>(factory: F, cases: u32)
where
    F: Fn(StoreOptions) -> Fut,
    Fut: Future<Output = Fixture>,
{
    run(factory, cases, false);
}

/// Like [`check`], with each worker on a connection of its own (for stores
/// whose fixtures can reopen; others fall back to one shared store).
pub fn check_across_connections<F, Fut>(factory: F, cases: u32)
where
    F: Fn(StoreOptions) -> Fut,
    Fut: Future<Output = Fixture>,
{
    run(factory, cases, true);
}

fn run<F, Fut>(factory: F, cases: u32, connection_per_worker: bool)
where
    F: Fn(StoreOptions) -> Fut,
    Fut: Future<Output = Fixture>,
{
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(&histories(), |(workers, ops)| {
        runtime
            .block_on(run_history(&factory, workers, &ops, connection_per_worker))
            .map_err(TestCaseError::fail)
    });
    if let Err(e) = result {
        panic!("model check failed: {e}");
    }
}
