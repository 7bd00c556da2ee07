//! What the engine reports when it cannot proceed: the caller's fault
//! (a malformed operation, a policy refusal), the policy's, a deposed
//! holder's, or the store's.

use idem_core::{OpError, PolicyError};
use idem_store::StoreError;
use thiserror::Error;

use super::admission;
use crate::policy::EvalError;

/// Why the engine could not proceed.
#[derive(Debug, Error)]
pub enum EngineError {
    /// The operation itself is malformed.
    #[error("{0}")]
    Operation(#[from] OpError),
    /// The policy refused to derive a key for the operation.
    #[error("the policy refused the operation: {0}")]
    Refused(PolicyError),
    /// The policy failed (trap, limit, malformed output, unsafe decision).
    #[error("the policy failed: {0}")]
    Policy(#[from] EvalError),
    /// This holder was deposed: its write changed nothing.
    #[error("fenced: {0}")]
    Fenced(StoreError),
    /// The store failed.
    #[error("store error: {0}")]
    Store(StoreError),
    /// The policy's digest is not registered for its namespace (see
    /// [`admission`](super::admission)): nothing was written.
    #[error("{0}")]
    Unregistered(Box<admission::Unregistered>),
}

impl EngineError {
    /// Whether the store could not serve the call (unreachable, busy, its
    /// disk full…: [`StoreError::is_unavailable`]): a caller riding out an
    /// outage sends the call again.
    pub fn is_store_unavailable(&self) -> bool {
        matches!(self, EngineError::Store(s) if s.is_unavailable())
    }
}

impl From<StoreError> for EngineError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Fenced { .. }
            | StoreError::NotInProgress { .. }
            | StoreError::Gone { .. } => EngineError::Fenced(e),
            other => EngineError::Store(other),
        }
    }
}
