//! A holder's end of its attempt, and the writes a group commit carries.

use super::{ClaimOutcome, ClaimRequest, Outcome, RecordKey, RecordState};

// Exhaustive on purpose (not `#[non_exhaustive]`): a holder's end completes or fails; each maps
// to a record state.
/// How a holder ends its attempt: [`Writes::complete`](crate::Writes::complete) or [`Writes::fail`](crate::Writes::fail).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// Completed: the record becomes final.
    Completed,
    /// Failed: retryable (a take-over may follow) or permanent (final).
    Failed {
        /// Whether a take-over may follow.
        retryable: bool,
    },
}

impl Ending {
    /// The state the record takes.
    pub fn state(self) -> RecordState {
        match self {
            Ending::Completed => RecordState::Completed,
            Ending::Failed { retryable: true } => RecordState::FailedRetryable,
            Ending::Failed { retryable: false } => RecordState::FailedPermanent,
        }
    }
}

/// One holder's end of its attempt, for [`Writes::finish_many`](crate::Writes::finish_many).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finish {
    /// The record.
    pub key: RecordKey,
    /// The fence the holder claimed under.
    pub fence: u64,
    /// Completed or failed.
    pub ending: Ending,
    /// What is stored.
    pub outcome: Outcome,
}

// Exhaustive on purpose (not `#[non_exhaustive]`): a backend's `write_many` must carry out each
// kind of write.
/// One grouped write, for [`Writes::write_many`](crate::Writes::write_many): a claim or a holder's end.
// Moved once into a group commit's line and out into a batch: boxing the
// larger variant would cost every claim an allocation for nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Write {
    /// [`Writes::claim`](crate::Writes::claim).
    Claim(ClaimRequest),
    /// [`Writes::complete`](crate::Writes::complete) or [`Writes::fail`](crate::Writes::fail).
    Finish(Finish),
}

// Exhaustive on purpose (not `#[non_exhaustive]`): one answer per kind of `Write`.
/// What one [`Write`] got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteOutcome {
    /// A claim's outcome.
    Claim(ClaimOutcome),
    /// A finish was written.
    Finished,
}
