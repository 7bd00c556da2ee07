//! The first read of a job's operations: every entry parsed and derived
//! before anything is claimed, and what the second read needs kept in about
//! a hundred and fifty bytes per operation: one bit (is it this worker's?)
//! and, for each one this worker runs, its derivation (key, fingerprint,
//! partition, retention, lease) and eight bytes standing for the operation,
//! so the second read hands on the first read's derivation, without
//! calling the policy again, and can tell it reads what was checked.
//!
//! A derive of a JavaScript or Python policy (a fresh instance of a 12–19 MB
//! component) costs a thousand times one of a Rust policy: deriving once is
//! what keeps such a policy's run from halving its rate, and deriving on
//! every core (a chunk of entries at a time, [`derive_chunk`]) what keeps
//! the first read from running at one core's pace. Each derivation is a
//! fresh instance of a pure function of its operation, so the order they
//! run in changes nothing; what the plan keeps, the first invalid entry it
//! stops at and the entries it reports skipped stay in the source's order.
//! One million operations keep about 150 MB here.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::num::NonZero;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use idem_core::{Digest, KeyedDerivation, Operation};

use super::JobOptions;
use super::error::JobError;
use super::event::{JobEvent, Observer};
use super::ownership::Ownership;
use super::source::{OperationSource, SourceItem, Unreadable};
use crate::engine::EngineError;
use crate::policy::LoadedPolicy;

/// A job's operations after the first read: every entry parsed and derived
/// (refused before anything else happens, or skipped and reported with
/// [`JobOptions::skip_invalid`]), with what the run needs of each kept
/// (see the [job module](super)). Read before a store is opened, so that
/// an operation the policy refuses leaves nothing behind: no SQLite file
/// created, no PostgreSQL schema migrated; then run with
/// [`JobRunner::run_planned`](super::JobRunner::run_planned), which reads
/// the source again.
pub struct JobPlan {
    pub(crate) source: Arc<dyn OperationSource>,
    pub(crate) plan: Plan,
    /// The share the plan kept: the runner must run the same one.
    pub(crate) ownership: Option<Ownership>,
}

impl std::fmt::Debug for JobPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobPlan")
            .field("operations", &self.plan.to_run())
            .field("skipped", &self.plan.skipped())
            .field("not_owned", &self.plan.not_owned())
            .finish()
    }
}

impl JobPlan {
    /// Reads every entry of `source` and derives it with `policy` (its
    /// clock: this process's), as `options` ask (`skip_invalid`, and with
    /// `ownership`, only this worker's share); `observer` hears every entry
    /// skipped. Blocking: file I/O and a policy call per operation (in an
    /// async context, call it from `spawn_blocking`).
    // A large error ends the run, once: its size costs nothing.
    #[allow(clippy::result_large_err)]
    pub fn read(
        policy: &LoadedPolicy,
        source: impl OperationSource,
        options: &JobOptions,
        observer: impl Fn(JobEvent<'_>) + Send + Sync + 'static,
    ) -> Result<JobPlan, JobError> {
        let clock = idem_store::StoreClock::default();
        JobPlan::with(
            &|op: &Operation| crate::engine::derive_with(policy, op, clock.now_ms()),
            Arc::new(source),
            options,
            &(Arc::new(observer) as Observer),
        )
    }

    /// The first read of `source`, each operation derived by `derive`.
    #[allow(clippy::result_large_err)]
    pub(crate) fn with(
        derive: &Derive<'_>,
        source: Arc<dyn OperationSource>,
        options: &JobOptions,
        observer: &Observer,
    ) -> Result<JobPlan, JobError> {
        let plan = plan(derive, &*source, options, observer)?;
        Ok(JobPlan {
            source,
            plan,
            ownership: options.ownership.clone(),
        })
    }

    /// How many operations the run will settle (this worker's, not
    /// skipped).
    pub fn operations(&self) -> usize {
        self.plan.to_run()
    }

    /// How many entries were skipped as invalid.
    pub fn skipped(&self) -> u64 {
        self.plan.skipped()
    }
}

/// What the first read found.
#[derive(Debug, Default)]
pub(crate) struct Plan {
    /// One bit per valid entry, in order: whether this worker runs it.
    owned: Vec<u64>,
    /// How many valid entries (bits in `owned`).
    valid: u64,
    /// For each entry this worker runs, in order: its derivation.
    planned: Vec<Planned>,
    /// The policy's namespace, the same in every derivation of one engine.
    namespace: Option<Arc<str>>,
    /// Positions skipped as invalid, ascending.
    skipped: Vec<u64>,
}

impl Plan {
    /// How many operations this worker runs.
    pub(crate) fn to_run(&self) -> usize {
        self.planned.len()
    }

    /// How many entries were skipped as invalid.
    pub(crate) fn skipped(&self) -> u64 {
        self.skipped.len() as u64
    }

    /// How many valid entries another worker owns.
    pub(crate) fn not_owned(&self) -> u64 {
        self.valid - self.planned.len() as u64
    }

    /// Whether the `index`th valid entry is this worker's.
    pub(crate) fn owns(&self, index: u64) -> bool {
        let word = self.owned[(index / 64) as usize];
        word & (1 << (index % 64)) != 0
    }

    /// The derivation of the `index`th operation this worker runs, when
    /// `op` is the operation the first read derived it from.
    pub(crate) fn derivation(&self, index: usize, op: &Operation) -> Option<KeyedDerivation> {
        let planned = self.planned.get(index)?;
        if planned.operation != check_of(op) {
            return None;
        }
        Some(KeyedDerivation {
            namespace: self.namespace.as_deref().unwrap_or_default().to_string(),
            key: planned.key,
            fingerprint: planned.fingerprint,
            // The material serves explanations (`idem key --explain`, `idem
            // diff`), not a run: it is not kept.
            key_material: Vec::new(),
            fingerprint_material: Vec::new(),
            partition: planned.partition.to_string(),
            retention_s: planned.retention_s,
            lease_s: planned.lease_s,
        })
    }

    fn push_planned(&mut self, op: &Operation, keyed: KeyedDerivation) {
        match &self.namespace {
            None => self.namespace = Some(keyed.namespace.as_str().into()),
            Some(namespace) => debug_assert_eq!(
                &**namespace, keyed.namespace,
                "one engine derives in one namespace"
            ),
        }
        self.planned.push(Planned {
            key: keyed.key,
            fingerprint: keyed.fingerprint,
            partition: keyed.partition.into_boxed_str(),
            retention_s: keyed.retention_s,
            lease_s: keyed.lease_s,
            operation: check_of(op),
        });
    }

    /// Whether `position` was skipped as invalid.
    pub(crate) fn is_skipped(&self, position: u64) -> bool {
        self.skipped.binary_search(&position).is_ok()
    }

    /// How many valid entries there are.
    pub(crate) fn valid(&self) -> u64 {
        self.valid
    }

    fn push_valid(&mut self, owned: bool) {
        if self.valid.is_multiple_of(64) {
            self.owned.push(0);
        }
        if owned {
            let last = self.owned.len() - 1;
            self.owned[last] |= 1 << (self.valid % 64);
        }
        self.valid += 1;
    }
}

/// What the first read keeps of an operation this worker runs.
#[derive(Debug)]
struct Planned {
    key: Digest,
    fingerprint: Digest,
    partition: Box<str>,
    retention_s: u64,
    lease_s: u32,
    /// [`check_of`] the operation.
    operation: u64,
}

/// Eight bytes standing for an operation (its canonical form, which is what
/// the policy derived from): the second read compares. Not a security check
/// (a changed file is the operator's own, and both reads are one process's),
/// only a guard against running what was not checked.
fn check_of(op: &Operation) -> u64 {
    let mut hasher = DefaultHasher::new();
    op.canonical_json().hash(&mut hasher);
    hasher.finish()
}

/// How a plan derives one operation: the policy with the run's clock.
/// Called from several threads at once.
pub(crate) type Derive<'a> = dyn Fn(&Operation) -> Result<KeyedDerivation, EngineError> + Sync + 'a;

/// Entries read and derived together. Large enough that the threads'
/// start and the chunk's last, unshared derive cost little (a JavaScript
/// derive is about a millisecond); small enough to hold only a few hundred
/// operations at a time, and to stop soon after an invalid one.
const CHUNK: usize = 256;

/// Reads every entry of `source`, parses and derives it, and keeps what the
/// second read needs. With `options.ownership`, an operation is this
/// worker's when it owns its partition among the members asked for (the
/// store registers exactly those: see [`super::ownership::join`]).
///
/// The entries are derived on every core, a chunk at a time, while the
/// next chunk is read; the results are then taken in the source's order,
/// so the plan, the error for the first invalid entry and the skipped
/// entries' reports are what one thread deriving in order would make.
// A large error ends the run, once: its size costs nothing.
#[allow(clippy::result_large_err)]
pub(crate) fn plan(
    derive: &Derive<'_>,
    source: &dyn OperationSource,
    options: &JobOptions,
    observer: &Observer,
) -> Result<Plan, JobError> {
    let ownership: Option<&Ownership> = options.ownership.as_ref();
    let mut read = source.read().map_err(JobError::Source)?;
    let threads = std::thread::available_parallelism().map_or(1, NonZero::get);
    let mut plan = Plan::default();
    let mut chunk: Vec<SourceItem> = read.by_ref().take(CHUNK).collect();
    while !chunk.is_empty() {
        let (derived, next) = derive_chunk(derive, &chunk, threads, || {
            read.by_ref().take(CHUNK).collect::<Vec<_>>()
        });
        for (
            SourceItem {
                position,
                operation,
            },
            derived,
        ) in chunk.into_iter().zip(derived)
        {
            let invalid = match (operation, derived) {
                (Err(unreadable), _) => Invalid::Unreadable(unreadable),
                (Ok(op), Some(Ok(keyed))) => {
                    let owned = ownership.is_none_or(|o| {
                        idem_core::ownership::owns(&keyed.partition, &o.member, &o.members)
                    });
                    plan.push_valid(owned);
                    if owned {
                        plan.push_planned(&op, keyed);
                    }
                    continue;
                }
                (Ok(op), Some(Err(error))) => Invalid::Underived(op, error),
                (Ok(_), None) => unreachable!("every parsed entry of a chunk is derived"),
            };
            if !options.skip_invalid {
                return Err(invalid.into_error(position));
            }
            let (input, error) = invalid.describe();
            observer(JobEvent::Skipped {
                position,
                input: &input,
                error: &error,
            });
            plan.skipped.push(position);
        }
        chunk = next;
    }
    Ok(plan)
}

/// One derivation per entry of `chunk` (`None` for an entry that did not
/// parse), in the chunk's order, derived by `threads` threads taking the
/// next entry as each is free; this thread first calls `meanwhile` (the
/// next chunk's read), then derives too. Returns the derivations and what
/// `meanwhile` returned. A panic in a derive is this thread's panic, as it
/// was when one thread derived.
fn derive_chunk<T>(
    derive: &Derive<'_>,
    chunk: &[SourceItem],
    threads: usize,
    meanwhile: impl FnOnce() -> T,
) -> (Vec<Option<Result<KeyedDerivation, EngineError>>>, T) {
    type Derived = Result<KeyedDerivation, EngineError>;
    let next = AtomicUsize::new(0);
    // Takes entries until none is left: each taker's derivations with
    // their places in the chunk.
    let take = || {
        let mut taken: Vec<(usize, Derived)> = Vec::new();
        loop {
            let index = next.fetch_add(1, Ordering::Relaxed);
            let Some(item) = chunk.get(index) else {
                return taken;
            };
            if let Ok(op) = &item.operation {
                taken.push((index, derive(op)));
            }
        }
    };
    let mut derived: Vec<Option<Derived>> = Vec::new();
    derived.resize_with(chunk.len(), || None);
    let after = std::thread::scope(|scope| {
        // One core is this thread's: it reads the next chunk, then derives.
        let helpers: Vec<_> = (1..threads.min(chunk.len()))
            .map(|_| scope.spawn(take))
            .collect();
        let after = meanwhile();
        let mine = take();
        for (index, result) in helpers
            .into_iter()
            .flat_map(|helper| {
                helper
                    .join()
                    .unwrap_or_else(|p| std::panic::resume_unwind(p))
            })
            .chain(mine)
        {
            derived[index] = Some(result);
        }
        after
    });
    (derived, after)
}

/// Why an entry is not a valid operation.
enum Invalid {
    /// It does not parse.
    Unreadable(Unreadable),
    /// The policy refused or failed to derive it.
    Underived(Operation, EngineError),
}

impl Invalid {
    fn into_error(self, position: u64) -> JobError {
        match self {
            Invalid::Unreadable(Unreadable { error, text }) => JobError::Unreadable {
                position,
                error,
                text,
            },
            Invalid::Underived(op, error) => JobError::Derive {
                position,
                operation: op.canonical_json(),
                error,
            },
        }
    }

    /// The entry as text, and why it is invalid.
    fn describe(self) -> (String, String) {
        match self {
            Invalid::Unreadable(Unreadable { error, text }) => (text, error),
            Invalid::Underived(op, error) => (op.canonical_json(), error.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    //! The plan derived on every core is the plan one thread deriving in
    //! order makes: the same derivations in the same places, the same
    //! entries skipped and reported in order, the same first invalid entry.

    use std::sync::Mutex;
    use std::sync::atomic::AtomicU64;

    use idem_core::{ErrorCode, PolicyError};

    use super::super::source::SourceRead;
    use super::*;

    /// Entries of which some do not parse: several chunks' worth.
    struct Entries(Vec<Result<Operation, Unreadable>>);

    impl OperationSource for Entries {
        fn read(&self) -> Result<SourceRead, String> {
            let entries = self.0.clone();
            Ok(Box::new(entries.into_iter().enumerate().map(
                |(i, operation)| SourceItem {
                    position: i as u64 + 1,
                    operation,
                },
            )))
        }
    }

    /// Entry `i`: with `refunds`, a refund (refused) every 97th from the
    /// 5th; unreadable every 89th from the 7th; else a charge.
    fn entries(count: usize, refunds: bool) -> Entries {
        Entries(
            (0..count)
                .map(|i| {
                    if i % 89 == 7 {
                        return Err(Unreadable {
                            error: "not JSON".into(),
                            text: format!("line {i}"),
                        });
                    }
                    let kind = if refunds && i % 97 == 5 {
                        "refund"
                    } else {
                        "charge"
                    };
                    let json =
                        format!(r#"{{"kind":"{kind}","tenant":"t","fields":{{"n":"{i}"}}}}"#);
                    Ok(Operation::from_json(&json, &Default::default()).unwrap())
                })
                .collect(),
        )
    }

    /// A stand-in policy: the key from the canonical operation, refunds
    /// refused. Counts its calls.
    fn derive(op: &Operation, calls: &AtomicU64) -> Result<KeyedDerivation, EngineError> {
        calls.fetch_add(1, Ordering::Relaxed);
        let json = op.canonical_json();
        if json.contains("refund") {
            return Err(EngineError::Refused(PolicyError {
                code: ErrorCode::UnsupportedKind,
                field: None,
                message: "no refunds".into(),
            }));
        }
        Ok(KeyedDerivation {
            namespace: "ns".into(),
            key: Digest::of_bytes(json.as_bytes()),
            fingerprint: Digest::of_bytes(b"f"),
            key_material: Vec::new(),
            fingerprint_material: Vec::new(),
            partition: format!("p{}", json.len() % 7),
            retention_s: 60,
            lease_s: 30,
        })
    }

    #[test]
    fn every_entry_is_derived_once_and_kept_in_the_source_order() {
        let source = entries(3 * CHUNK + 17, true);
        let calls = AtomicU64::new(0);
        let reported = Arc::new(Mutex::new(Vec::new()));
        let observer: Observer = {
            let reported = reported.clone();
            Arc::new(move |event| {
                if let JobEvent::Skipped { position, .. } = event {
                    reported.lock().unwrap().push(position);
                }
            })
        };
        let options = JobOptions {
            skip_invalid: true,
            ..JobOptions::default()
        };
        let plan = plan(
            &|op: &Operation| derive(op, &calls),
            &source,
            &options,
            &observer,
        )
        .unwrap();

        // One thread in order, by hand.
        let check = AtomicU64::new(0);
        let (mut kept, mut skipped) = (Vec::new(), Vec::new());
        for (i, entry) in source.0.iter().enumerate() {
            match entry.as_ref().ok().map(|op| (op, derive(op, &check))) {
                Some((op, Ok(keyed))) => kept.push((op, keyed)),
                _ => skipped.push(i as u64 + 1),
            }
        }
        let parsed = source.0.iter().filter(|e| e.is_ok()).count() as u64;
        assert_eq!(
            calls.load(Ordering::Relaxed),
            parsed,
            "one derive per parsed entry"
        );
        assert_eq!(plan.to_run(), kept.len());
        assert_eq!(plan.valid(), kept.len() as u64);
        for (index, (op, keyed)) in kept.iter().enumerate() {
            assert!(plan.owns(index as u64));
            let planned = plan.derivation(index, op).expect("kept in its place");
            assert_eq!(
                (planned.key, planned.partition),
                (keyed.key, keyed.partition.clone())
            );
        }
        assert_eq!(*reported.lock().unwrap(), skipped, "reported in order");
        assert!(skipped.iter().all(|p| plan.is_skipped(*p)));
        assert_eq!(plan.skipped(), skipped.len() as u64);
    }

    #[test]
    fn the_first_invalid_entry_in_the_source_order_stops_the_plan() {
        let calls = AtomicU64::new(0);
        let observer: Observer = Arc::new(|_| {});
        let options = JobOptions::default();
        let derive = |op: &Operation| derive(op, &calls);
        // Entry 5 (position 6) is refused before entry 7 does not parse.
        match plan(&derive, &entries(2 * CHUNK, true), &options, &observer) {
            Err(JobError::Derive { position: 6, .. }) => {}
            other => panic!("expected the refusal at 6: {other:?}"),
        }
        // Without the refusals, the unreadable entry 7 (position 8) first.
        match plan(&derive, &entries(2 * CHUNK, false), &options, &observer) {
            Err(JobError::Unreadable { position: 8, .. }) => {}
            other => panic!("expected the unreadable entry at 8: {other:?}"),
        }
    }
}
