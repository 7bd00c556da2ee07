//! How each operation of a job ended, and the tally of a whole run.

use serde::Serialize;

/// How one operation of a job ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum End {
    /// The effect ran and succeeded; recorded completed.
    Executed,
    /// The effect had already happened: its completed outcome was replayed.
    Replayed,
    /// A permanent failure was replayed (the effect does not run again).
    ReplayedFailure,
    /// Another holder is running it.
    InProgress,
    /// The key was used for a different request (fingerprint mismatch).
    Conflict,
    /// The policy rejected the duplicate.
    Rejected,
    /// The claim had expired with no end recorded, and the policy sent it
    /// to review (outcome unknown): a person settles it (`idem review`).
    SentToReview,
    /// The effect ran and failed, or could not start; recorded failed.
    Failed,
    /// This run was deposed while the effect ran; its result not recorded.
    Fenced,
    /// Whether the effect happened is unknown: the effect said so, or it
    /// ran and the store could not record how it ended. These, and only
    /// these, are for a person to settle (`idem review`).
    Unknown,
    /// Never started, so no effect happened: its claim failed (the store
    /// refused it, or was unavailable past the job's outage budget) or the
    /// run stopped before reaching it. A re-run does it.
    NotRun,
    /// The store refused the claim: the membership moved on since this run
    /// registered it, so this run may no longer own the partition. Not run.
    StaleEpoch,
    /// The policy failed while deciding what a duplicate gets (a trap, a
    /// limit, an unsafe decision): nothing ran.
    PolicyFailed,
    /// Refused for good before anything was claimed: not an operation, a
    /// value idem does not accept (a NUL, too large), the policy refused to
    /// derive its key, or the store refused the request itself. Sent again
    /// unchanged it gets the same answer, so it is never tried again
    /// (`idem consume` terminates the message).
    Refused,
    /// Another member owns it (partitioned ownership): put off for its
    /// source to hand to that member (`idem consume --shard`; a job leaves
    /// out what it does not own when it first reads its operations).
    NotOwned,
}

impl End {
    /// Every end, in the order [`Summary`] lists their counts.
    pub const ALL: [End; 15] = [
        End::Executed,
        End::Replayed,
        End::ReplayedFailure,
        End::InProgress,
        End::Conflict,
        End::Rejected,
        End::SentToReview,
        End::Failed,
        End::Fenced,
        End::Unknown,
        End::StaleEpoch,
        End::PolicyFailed,
        End::Refused,
        End::NotRun,
        End::NotOwned,
    ];

    /// The name of the [`Summary`] count this end adds to (its field, as
    /// `--json` prints it): a label for a metric of ends.
    pub fn summary_field(self) -> &'static str {
        match self {
            End::Executed => "executed",
            End::Replayed => "replayed",
            End::ReplayedFailure | End::Failed => "failed",
            End::InProgress => "in_progress",
            End::Conflict => "conflicts",
            End::Rejected => "rejected",
            End::SentToReview => "sent_to_review",
            End::Fenced => "fenced",
            End::Unknown => "unknown",
            End::StaleEpoch => "stale_epoch",
            End::PolicyFailed => "policy_failed",
            End::NotRun => "not_run",
            End::Refused => "refused",
            End::NotOwned => "not_owned",
        }
    }
}

/// How a job's operations ended, counted. Serialised as `idem run --json`
/// prints it (the field names are that format).
#[derive(Debug, Default, Clone, Serialize, PartialEq, Eq)]
pub struct Summary {
    /// The effect ran and succeeded.
    pub executed: u64,
    /// The effect had already happened: its outcome was replayed.
    pub replayed: u64,
    /// Another holder is running it.
    pub in_progress: u64,
    /// The key was used for a different request.
    pub conflicts: u64,
    /// The policy rejected the duplicate (e.g. an unknown outcome in review).
    pub rejected: u64,
    /// Expired claims (a holder that went silent mid-effect) this run
    /// found and the policy sent to review: for a person to settle.
    pub sent_to_review: u64,
    /// The effect ran and failed, or a permanent failure was replayed.
    pub failed: u64,
    /// This run was deposed while the effect ran; its result not recorded.
    pub fenced: u64,
    /// Outcome unknown: the effect may have happened and its end was not
    /// recorded (e.g. the command was killed, or the store went away
    /// before its completion was written). What `idem review` lists.
    pub unknown: u64,
    /// The store refused the claim: the membership changed since this run
    /// registered it, so this run may no longer own the partition. Not run.
    pub stale_epoch: u64,
    /// Owned by another worker (partitioned ownership): not this run's.
    pub not_owned: u64,
    /// The policy failed on a duplicate (`on-duplicate` trapped, ran out of
    /// a limit, or answered unsafely): nothing ran.
    pub policy_failed: u64,
    /// Entries skipped as invalid (not an operation, or the policy refused
    /// or failed to derive it), with [`super::JobOptions::skip_invalid`].
    pub skipped: u64,
    /// Inputs refused for good before anything was claimed ([`End::Refused`]:
    /// not an operation, a value idem does not accept, the policy's refusal
    /// to derive a key, a request the store refuses). `idem consume`
    /// terminates each (RabbitMQ: rejected without requeue, to a
    /// dead-letter exchange if the queue has one). `idem run` stops on such
    /// a line before anything runs, or skips it (`skipped`).
    pub refused: u64,
    /// Operations this run never started, so no effect of theirs happened:
    /// their claim failed, the store was unavailable past the outage budget,
    /// or the source changed after it was checked (a warning says which).
    pub not_run: u64,
    /// Set when the run stopped taking operations because the store was
    /// unavailable for longer than [`super::JobOptions::store_outage`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outage: Option<Outage>,
    /// Set when a consumer stopped because it was deposed: its ownership
    /// group's membership moved on (`idem consume --shard`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub deposed: bool,
    /// Set when a run stopped because no operation could run: why. A job
    /// stops when its policy may not claim in the namespace or the store
    /// failed in a way waiting does not change; a consumer also when its
    /// command cannot start or a record cannot be read, and the delivery
    /// that showed it was put back for a consumer that can.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stopped: Option<String>,
    /// Deliveries a consumer stopping when idle left unacknowledged (given
    /// to another consumer of its name, alive or crashed, and not settled
    /// when it stopped waiting for them).
    #[serde(skip_serializing_if = "is_zero")]
    pub unacknowledged: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Why a run stopped early: its store was gone past the outage budget.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Outage {
    /// How long the store had been unavailable when the run gave up, ms
    /// (the outage budget, when an operation's own call gave up after
    /// riding it out).
    pub lasted_ms: u64,
    /// What the store last said.
    pub error: String,
}

impl Summary {
    /// Counts one operation's end.
    pub fn count(&mut self, end: End) {
        let counter = match end {
            End::Executed => &mut self.executed,
            End::Replayed => &mut self.replayed,
            End::ReplayedFailure | End::Failed => &mut self.failed,
            End::InProgress => &mut self.in_progress,
            End::Conflict => &mut self.conflicts,
            End::Rejected => &mut self.rejected,
            End::SentToReview => &mut self.sent_to_review,
            End::Fenced => &mut self.fenced,
            End::Unknown => &mut self.unknown,
            End::StaleEpoch => &mut self.stale_epoch,
            End::PolicyFailed => &mut self.policy_failed,
            End::NotRun => &mut self.not_run,
            End::Refused => &mut self.refused,
            End::NotOwned => &mut self.not_owned,
        };
        *counter += 1;
    }

    /// Whether every operation this run owned is completed (executed now or
    /// replayed): nothing is left for a re-run, and nothing was skipped.
    /// Operations owned by other workers do not count.
    pub fn all_completed(&self) -> bool {
        self.in_progress
            + self.conflicts
            + self.rejected
            + self.sent_to_review
            + self.failed
            + self.fenced
            + self.unknown
            + self.stale_epoch
            + self.policy_failed
            + self.skipped
            + self.refused
            + self.not_run
            == 0
    }
}
