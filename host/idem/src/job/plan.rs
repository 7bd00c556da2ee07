//! The first read of a job's operations: every entry parsed and derived
//! before anything is claimed, and what the second read needs kept in a few
//! bytes per operation: one bit (is it this worker's?) and, for each one
//! this worker runs, eight bytes of its key and fingerprint, so the second
//! read can tell it reads what was checked.

use idem_core::{KeyedDerivation, Operation};

use super::error::JobError;
use super::event::{JobEvent, Observer};
use super::ownership::Ownership;
use super::source::{OperationSource, SourceItem, Unreadable};
use crate::engine::{Engine, EngineError};

/// What the first read found.
#[derive(Debug, Default)]
pub(crate) struct Plan {
    /// One bit per valid entry, in order: whether this worker runs it.
    owned: Vec<u64>,
    /// How many valid entries (bits in `owned`).
    valid: u64,
    /// For each entry this worker runs, in order: [`check_of`] its
    /// derivation.
    checks: Vec<u64>,
    /// Positions skipped as invalid, ascending.
    skipped: Vec<u64>,
    /// Valid entries another worker owns.
    not_owned: u64,
}

impl Plan {
    /// How many operations this worker runs.
    pub(crate) fn to_run(&self) -> usize {
        self.checks.len()
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

    /// The check of the `index`th operation this worker runs.
    pub(crate) fn check(&self, index: usize) -> Option<u64> {
        self.checks.get(index).copied()
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

/// Eight bytes standing for a derivation's key and fingerprint: the second
/// read derives each operation again and compares. Not a security check (a
/// changed file is the operator's own), only a guard against running what
/// was not checked.
pub(crate) fn check_of(keyed: &KeyedDerivation) -> u64 {
    let eight = |d: &[u8; 32]| u64::from_le_bytes(d[..8].try_into().expect("8 of 32 bytes"));
    eight(&keyed.key.0) ^ eight(&keyed.fingerprint.0).rotate_left(32)
}

/// How the first read treats an entry that is not a valid operation.
#[derive(Debug, Clone, Copy)]
pub(crate) enum OnInvalid {
    /// Stop the run before anything is claimed.
    Stop,
    /// Report it ([`JobEvent::Skipped`]) and run the rest.
    Skip,
}

/// Reads every entry of `source`, parses and derives it, and keeps what the
/// second read needs. With `ownership`, an operation is this worker's when
/// it owns its partition among the members asked for (the store registers
/// exactly those: see [`super::ownership::join`]).
// A large error ends the run, once: its size costs nothing.
#[allow(clippy::result_large_err)]
pub(crate) fn plan(
    engine: &Engine,
    source: &dyn OperationSource,
    on_invalid: OnInvalid,
    ownership: Option<&Ownership>,
    observer: &Observer,
) -> Result<Plan, JobError> {
    let read = source.read().map_err(JobError::Source)?;
    let mut plan = Plan::default();
    for SourceItem {
        position,
        operation,
    } in read
    {
        let invalid = match operation {
            Err(unreadable) => Invalid::Unreadable(unreadable),
            Ok(op) => match engine.derive(&op) {
                Ok(keyed) => {
                    let owned = ownership.is_none_or(|o| {
                        idem_core::ownership::owns(&keyed.partition, &o.member, &o.members)
                    });
                    plan.push_valid(owned);
                    if owned {
                        plan.checks.push(check_of(&keyed));
                    } else {
                        plan.not_owned += 1;
                    }
                    continue;
                }
                Err(error) => Invalid::Underived(op, error),
            },
        };
        match on_invalid {
            OnInvalid::Stop => return Err(invalid.into_error(position)),
            OnInvalid::Skip => {
                let (input, error) = invalid.describe();
                observer(JobEvent::Skipped {
                    position,
                    input: &input,
                    error: &error,
                });
                plan.skipped.push(position);
            }
        }
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
