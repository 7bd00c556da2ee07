//! An effect whose writes commit in the store's own transaction, with its
//! holder's end: what its closure answers, and how the transaction ended.

use super::{Outcome, Record};

/// Why an effect in the store's transaction did not produce an outcome, as
/// its closure says. Either way its writes are rolled back.
///
/// `D` is the driver's error (`rusqlite::Error`, `tokio_postgres::Error`),
/// so that the closure's `?` on a statement converts into
/// [`EffectError::Database`]; the store then tells a conflict that changed
/// nothing (PostgreSQL's serialization failure and deadlock, SQLSTATE
/// 40001 and 40P01: the whole transaction is run again, the closure
/// included) from the statement's own failure (recorded as the effect's
/// retryable failure).
#[derive(Debug)]
#[non_exhaustive]
pub enum EffectError<D> {
    /// A statement of the effect failed.
    Database(D),
    /// The effect failed on its own terms: recorded as this outcome
    /// (replayed to every duplicate when permanent; the policy may
    /// re-execute when retryable).
    Failed {
        /// Whether a later duplicate may re-execute.
        retryable: bool,
        /// What is stored: the status, any body, the error message.
        outcome: Outcome,
    },
}

impl<D> EffectError<D> {
    /// A failure a later duplicate may re-execute.
    pub fn retryable(outcome: Outcome) -> Self {
        EffectError::Failed {
            retryable: true,
            outcome,
        }
    }

    /// A failure that is final (replayed to every duplicate).
    pub fn permanent(outcome: Outcome) -> Self {
        EffectError::Failed {
            retryable: false,
            outcome,
        }
    }
}

#[cfg(feature = "sqlite")]
impl From<rusqlite::Error> for EffectError<rusqlite::Error> {
    fn from(e: rusqlite::Error) -> Self {
        EffectError::Database(e)
    }
}

#[cfg(feature = "postgres")]
impl From<tokio_postgres::Error> for EffectError<tokio_postgres::Error> {
    fn from(e: tokio_postgres::Error) -> Self {
        EffectError::Database(e)
    }
}

// Exhaustive on purpose (not `#[non_exhaustive]`): the effect's transaction either committed or
// rolled back.
/// How an effect in the store's transaction ended, when the store could
/// say (a deposed holder's is [`crate::StoreError::Fenced`] or another
/// conflict instead, and then nothing of it was committed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TxEnd {
    /// The effect's writes and the holder's completion committed together;
    /// the outcome as the store keeps it.
    Committed(Outcome),
    /// The effect failed: its writes were rolled back and *nothing was
    /// recorded*; the record is still in progress under the holder's
    /// fence, for the holder to record this failure (a write of its own,
    /// under the fence).
    Failed {
        /// Whether a later duplicate may re-execute.
        retryable: bool,
        /// What the failure is to be recorded as.
        outcome: Outcome,
    },
}

/// The failure a statement of the effect is recorded as: retryable, its
/// message the driver's.
pub(crate) fn statement_failed(message: String) -> TxEnd {
    TxEnd::Failed {
        retryable: true,
        outcome: Outcome::error(1, format!("the effect's statement failed: {message}")),
    }
}

/// Whether `record`, read back after a commit whose answer was lost, is
/// that commit's: completed under the holder's `fence` with the outcome it
/// sent. No one else writes under a fence (a take-over and a person's
/// resolution each draw a new one), so this is proof, not a guess.
pub(crate) fn is_our_completion(record: &Record, fence: u64, sent: &Outcome) -> bool {
    record.fence == fence
        && record.state == idem_core::RecordState::Completed
        && record
            .outcome
            .as_ref()
            .is_some_and(|o| o.status == sent.status && o.body == sent.body)
}
