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
//! what keeps such a policy's run from halving its rate. One million
//! operations keep about 150 MB here.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;

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
        let source: Arc<dyn OperationSource> = Arc::new(source);
        let clock = idem_store::StoreClock::default();
        let observer: Observer = Arc::new(observer);
        let plan = plan(
            &|op| crate::engine::derive_with(policy, op, clock.now_ms()),
            &*source,
            options,
            &observer,
        )?;
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
    /// Valid entries another worker owns.
    not_owned: u64,
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
        self.not_owned
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

/// Reads every entry of `source`, parses and derives it, and keeps what the
/// second read needs. With `options.ownership`, an operation is this
/// worker's when it owns its partition among the members asked for (the
/// store registers exactly those: see [`super::ownership::join`]).
// A large error ends the run, once: its size costs nothing.
#[allow(clippy::result_large_err)]
pub(crate) fn plan(
    derive: &dyn Fn(&Operation) -> Result<KeyedDerivation, EngineError>,
    source: &dyn OperationSource,
    options: &JobOptions,
    observer: &Observer,
) -> Result<Plan, JobError> {
    let ownership: Option<&Ownership> = options.ownership.as_ref();
    let read = source.read().map_err(JobError::Source)?;
    let mut plan = Plan::default();
    for SourceItem {
        position,
        operation,
    } in read
    {
        let invalid = match operation {
            Err(unreadable) => Invalid::Unreadable(unreadable),
            Ok(op) => match derive(&op) {
                Ok(keyed) => {
                    let owned = ownership.is_none_or(|o| {
                        idem_core::ownership::owns(&keyed.partition, &o.member, &o.members)
                    });
                    plan.push_valid(owned);
                    if owned {
                        plan.push_planned(&op, keyed);
                    } else {
                        plan.not_owned += 1;
                    }
                    continue;
                }
                Err(error) => Invalid::Underived(op, error),
            },
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
    Ok(plan)
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
