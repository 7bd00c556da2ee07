//! Every store call, written once over the backend ports
//! (`crate::backend`): validate, pick the decision (`machine/`), run it in
//! the backend's record transaction or on its fast path, and check a fast
//! path's write against the machine's answer (debug builds).
//!
//! The claim sequence is split in two: what is decided (validate here, the
//! decision in `machine/`, the fence it draws) is written once, here; what
//! touches rows is each backend's `transact` (`crate::backend`): it checks
//! the ownership epoch, locks and loads the record, calls the decision
//! handed to it, and saves what comes back, with the attempt-log entry, in
//! the same transaction. A backend never decides.
//!
//! - `writes.rs`: [`crate::Writes`] for every backend; `claims.rs` and
//!   `finishes.rs` the two kinds, alone and in batches;
//! - `records.rs`: [`crate::Records`] for every backend;
//! - `ownership.rs`, `policy_registry.rs`: the other two capabilities;
//! - `in_tx.rs`: an effect in the store's own transaction (its fence
//!   check, its completion, a deposed holder's refusal logged);
//! - `gates.rs`: [`crate::Gates`] for every backend (the gate a
//!   downstream keeps);
//! - `checked.rs`: the debug check of what a fast path wrote.

mod checked;
mod claims;
mod finishes;
mod gates;
pub(crate) mod in_tx;
mod ownership;
mod policy_registry;
mod records;
mod writes;

use std::collections::HashMap;

use crate::backend::{Call, Decide, RecordBackend};
use crate::vocabulary::RecordKey;
use crate::vocabulary::StoreError;

/// Awaits one store call and records how long it took in
/// `idem_store_call_seconds{call}` (the metrics facade: nothing is
/// recorded, at the cost of one atomic load, when no recorder is installed).
async fn timed<T>(call: &'static str, work: impl std::future::Future<Output = T>) -> T {
    let started = std::time::Instant::now();
    let out = work.await;
    metrics::histogram!("idem_store_call_seconds", "call" => call)
        .record(started.elapsed().as_secs_f64());
    out
}

/// A call that draws no fence and carries no ownership token.
fn plain_call(context: &'static str, key: &RecordKey) -> Call {
    Call {
        context,
        key: key.clone(),
        draws_fence: false,
        ownership: None,
    }
}

/// Where one item of a batch stands.
enum Slot<T> {
    /// Answered.
    Done(Result<T, StoreError>),
    /// The same key as the item at this position, which came first.
    SameAs(usize),
    /// For the single path (or the batch statement, when it is a first
    /// occurrence), after the batch.
    Single,
}

/// Sorts out a batch's items before a batch statement: an item refused
/// already is answered; the first occurrence of each key is to be sent
/// (its position in the returned list); a later one is a repeat of it.
fn first_occurrences<'k, T>(
    items: impl IntoIterator<Item = (&'k RecordKey, Option<StoreError>)>,
) -> (Vec<Slot<T>>, Vec<usize>) {
    let mut slots = Vec::new();
    let mut first_of: HashMap<&RecordKey, usize> = HashMap::new();
    let mut sent = Vec::new();
    for (i, (key, refused)) in items.into_iter().enumerate() {
        slots.push(match refused {
            Some(refused) => Slot::Done(Err(refused)),
            None => match first_of.get(key) {
                Some(&first) => Slot::SameAs(first),
                None => {
                    first_of.insert(key, i);
                    sent.push(i);
                    Slot::Single
                }
            },
        });
    }
    (slots, sent)
}

/// The batch's answers in order: an answered slot as it is, every other
/// item through `single`, one at a time, in order.
async fn one_at_a_time<T, I, F>(
    slots: Vec<Slot<T>>,
    items: Vec<I>,
    mut single: impl FnMut(I) -> F,
) -> Vec<Result<T, StoreError>>
where
    F: Future<Output = Result<T, StoreError>>,
{
    let mut answers = Vec::with_capacity(slots.len());
    for (slot, item) in slots.into_iter().zip(items) {
        answers.push(match slot {
            Slot::Done(answer) => answer,
            Slot::SameAs(_) | Slot::Single => single(item).await,
        });
    }
    answers
}

/// One item of a batch sent through [`in_one_transaction`]: answered
/// already (refused before the store), or a record transaction to run.
enum Prepared<T> {
    Answered(Result<T, StoreError>),
    Call(Call, Decide<T>),
}

/// Runs every call of `prepared` in one [`RecordBackend::transact_many`]
/// (one commit where the backend shares one) and answers each item in
/// order, the answered ones as they are.
async fn in_one_transaction<B: RecordBackend, T: Send + 'static>(
    backend: &B,
    prepared: Vec<Prepared<T>>,
) -> Result<Vec<Result<T, StoreError>>, StoreError> {
    let mut slots = Vec::with_capacity(prepared.len());
    let mut calls = Vec::new();
    for item in prepared {
        match item {
            Prepared::Answered(answer) => slots.push(Some(answer)),
            Prepared::Call(call, decide) => {
                slots.push(None);
                calls.push((call, decide));
            }
        }
    }
    let mut answers = backend.transact_many(calls).await?.into_iter();
    slots
        .into_iter()
        .map(|slot| {
            slot.or_else(|| answers.next()).ok_or_else(|| {
                StoreError::Task("a batch transaction answered fewer calls than it ran".into())
            })
        })
        .collect()
}

/// `decide` with its answer mapped by `f`, for a batch of mixed calls.
fn mapped<T: 'static, U: 'static>(mut decide: Decide<T>, f: fn(T) -> U) -> Decide<U> {
    Box::new(move |current, now, fences| decide(current, now, fences).map(|step| step.map(f)))
}
