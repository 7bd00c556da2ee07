//! What the engine reports when it cannot proceed: the caller's fault
//! (a malformed operation, a policy refusal), the policy's, a deposed
//! holder's, or the store's.

use idem_core::{OpError, PolicyError};
use idem_store::StoreError;
use thiserror::Error;

use crate::policy::EvalError;

/// Why the engine could not proceed.
#[derive(Debug, Error)]
#[non_exhaustive]
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
    Unregistered(Box<Unregistered>),
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

/// Why a policy may not claim in its namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unregistered {
    /// The namespace.
    pub namespace: String,
    /// The digest of the policy that tried.
    pub found: String,
    /// The digests the namespace accepts (empty when nobody registered it
    /// and the store requires registration).
    pub accepted: Vec<String>,
}

impl std::fmt::Display for Unregistered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.accepted.is_empty() {
            write!(
                f,
                "policy {} may not claim in namespace `{}`: the store requires a registered policy and none is (register one with `idem policy activate`); nothing was written",
                self.found, self.namespace
            )
        } else {
            write!(
                f,
                "policy {} may not claim in namespace `{}`: its digest is not registered there (accepted: {}); a foreign or tampered policy is refused, a new version is activated with `idem policy activate`; nothing was written",
                self.found,
                self.namespace,
                self.accepted.join(", ")
            )
        }
    }
}
