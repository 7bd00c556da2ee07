//! What a running job tells its caller as it goes: each operation's end
//! (for a progress bar) and anything worth a word on the way.

use std::sync::Arc;

use super::summary::End;

/// Something that happened in a running job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum JobEvent<'a> {
    /// The run is about to claim: every operation is derived, the job
    /// lease (if any) is held, and `operations` of them are this run's
    /// (the rest belong to other workers). Exactly that many
    /// [`JobEvent::Ended`] follow.
    Started {
        /// How many operations this run will settle.
        operations: usize,
    },
    /// One operation ended. `note` says why, for the ends that deserve a
    /// word (a conflict, a rejection, a stale epoch, an effect that could
    /// not start or whose outcome is unknown, a deposed holder, a store
    /// error); `None` for the ordinary ones.
    Ended {
        /// How it ended.
        end: End,
        /// Why, for an operator.
        note: Option<&'a str>,
    },
    /// An entry was skipped as invalid (with
    /// [`super::JobOptions::skip_invalid`]), while the operations were
    /// checked, before anything was claimed.
    Skipped {
        /// Where it is in the source.
        position: u64,
        /// The entry: as read, or the operation as canonical JSON.
        input: &'a str,
        /// Why it is invalid.
        error: &'a str,
    },
    /// Something an operator should know: the store became unavailable
    /// and the job waits for it, or gave up on it past its outage budget
    /// (the run then stops taking operations); a batch claim failed (its
    /// operations end [`End::NotRun`]); the job lease was lost or could
    /// not be released.
    Warning(&'a str),
}

/// Receives a job's events, from any of its tasks (so it must be quick and
/// thread-safe).
pub(crate) type Observer = Arc<dyn Fn(JobEvent<'_>) + Send + Sync>;

/// The observer a runner has until it is given one: notes and warnings go
/// to `tracing`.
pub(crate) fn log_events() -> Observer {
    Arc::new(|event| match event {
        JobEvent::Ended {
            end,
            note: Some(note),
        } => tracing::warn!(?end, "{note}"),
        JobEvent::Started { .. } | JobEvent::Ended { .. } => {}
        JobEvent::Skipped {
            position, error, ..
        } => tracing::warn!(position, "skipped: {error}"),
        JobEvent::Warning(message) => tracing::warn!("{message}"),
    })
}
