//! Why a job did not run.

use idem_store::{JobLease, StoreError};
use thiserror::Error;

use crate::engine::EngineError;

/// Why [`super::JobRunner::run`] stopped before running any operation.
/// Failures of single operations are not errors: they are counted in the
/// [`super::Summary`].
#[derive(Debug, Error)]
pub enum JobError {
    /// The operation at `index` (0-based, in the order given) could not be
    /// derived: nothing was claimed, the job lease was not taken.
    #[error("operation {index}: {error}")]
    Derive {
        /// Its position among the operations given.
        index: usize,
        /// Why ([`EngineError::Refused`] when the policy refused it).
        #[source]
        error: EngineError,
    },
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
}
