//! Why a job did not run.

use idem_store::{JobLease, StoreError};
use thiserror::Error;

use crate::engine::EngineError;

/// Why [`super::JobRunner::run`] stopped before running any operation.
/// Failures of single operations are not errors: they are counted in the
/// [`super::Summary`].
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum JobError {
    /// The operation at `position` (the source's numbering: a line in a
    /// file, an index in a list) could not be derived: nothing was claimed,
    /// the job lease was not taken.
    #[error("operation at {position}: {error}")]
    Derive {
        /// Where it is in the source.
        position: u64,
        /// The operation, as canonical JSON, for messages.
        operation: String,
        /// Why ([`EngineError::Refused`] when the policy refused it).
        #[source]
        error: EngineError,
    },
    /// The entry at `position` is not an operation: nothing was claimed.
    #[error("entry at {position}: {error}")]
    Unreadable {
        /// Where it is in the source.
        position: u64,
        /// Why.
        error: String,
        /// The entry as read.
        text: String,
    },
    /// The source could not be read at all.
    #[error("cannot read the operations: {0}")]
    Source(String),
    /// Another live run holds the job lease: this run did nothing.
    #[error(
        "job {name} is already running ({}, lease fence {}, {remaining_ms} ms left); this run did nothing",
        current.holder,
        current.fence
    )]
    JobLeaseHeld {
        /// The job lease's name.
        name: String,
        /// The live lease.
        current: JobLease,
        /// How long it has left, store clock.
        remaining_ms: u64,
    },
    /// The store could not be asked for the job lease.
    #[error("cannot take job lease {name}: {error}")]
    JobLease {
        /// The job lease's name.
        name: String,
        /// The store's error.
        #[source]
        error: StoreError,
    },
    /// The membership could not be registered (partitioned ownership).
    #[error("cannot register the membership of group {group}: {error}")]
    Membership {
        /// The group.
        group: String,
        /// The store's error.
        #[source]
        error: StoreError,
    },
    /// The store registered a membership other than the one asked for, so
    /// this worker's share, computed from the one asked for, may be wrong.
    #[error("group {group}: the store holds the membership {held:?}, not {asked:?}")]
    MembershipMismatch {
        /// The group.
        group: String,
        /// The members asked for.
        asked: Vec<String>,
        /// The members the store holds.
        held: Vec<String>,
    },
}
