//! What an operation's answer comes to, whatever its source: its end
//! (counted in the summary and shown), a note for the ends that deserve a
//! word, what its source does with it next, and whether the run can go on.
//!
//! Written once for every source of operations — a job's file (`idem run`)
//! and a broker's delivery (`idem consume`) — so that the same answer
//! cannot mean one thing in one and another in the other: a policy's
//! refusal is refused for good in both, a store that cannot be used stops
//! both. A job, which reads each operation once, has nothing to settle and
//! takes the end, the note and the halt; a broker's source maps [`Then`]
//! onto its own acknowledgement (see `consume/settle.rs`).

use std::time::Duration;

use idem_core::Digest;
use idem_store::{ErrorClass, RecordKey, RecordState, StoreError};

use super::effect::Performed;
use super::summary::End;
use crate::engine::{Begin, EngineError};

/// What one operation came to.
pub(crate) struct Fate {
    /// How it ended.
    pub(crate) end: End,
    /// Why, for the ends that deserve a word (escaped by whoever shows it).
    pub(crate) note: Option<String>,
    /// What its source does with it.
    pub(crate) then: Then,
    /// Whether the run goes on.
    pub(crate) halt: Halt,
}

impl Fate {
    pub(crate) fn new(end: End, then: Then) -> Fate {
        Fate {
            end,
            note: None,
            then,
            halt: Halt::No,
        }
    }

    pub(crate) fn noted(mut self, note: String) -> Fate {
        self.note = Some(note);
        self
    }

    fn halting(mut self, halt: Halt) -> Fate {
        self.halt = halt;
        self
    }

    /// The same fate for another operation that met the same answer, without
    /// the note (said once, for the first).
    pub(crate) fn again(&self) -> Fate {
        Fate {
            end: self.end,
            note: None,
            then: self.then.clone(),
            halt: self.halt.clone(),
        }
    }
}

/// What the source does with an operation once its end is known.
#[derive(Clone)]
pub(crate) enum Then {
    /// Nothing more comes of it: its end is recorded (or replayed), or it
    /// is another holder's to end (a deposed run's).
    Done,
    /// Tried again later (the operation is fine; now is not the time).
    Later(Delay),
    /// Refused for good: sent again unchanged, it gets the same answer.
    Refused,
    /// Refused for good by the policy's rejection of a duplicate of the
    /// record `key`: a source may look at the record first (a duplicate of
    /// one waiting in review is with a person already).
    Rejected {
        /// The record.
        key: RecordKey,
    },
    /// Its record was sent to review: it waits for a person.
    Review {
        /// The record.
        key: RecordKey,
        /// Why the policy sent it there.
        reason: String,
    },
}

/// When an operation put off is tried again.
#[derive(Clone)]
pub(crate) enum Delay {
    /// At once: it is not the operation's fault, and nothing runs until
    /// someone changes something (the run stops: [`Halt::Stop`]).
    Now,
    /// After the source's own retry delay.
    Retry,
    /// When the policy says (its `retry_after_ms`), if it does.
    Hint(Option<u64>),
    /// Once the claim's lease has run out: the policy decides then.
    Lease(Duration),
    /// Another member owns it (partitioned ownership): when the source
    /// hands it to another of its consumers.
    Elsewhere,
}

/// Whether the run goes on after an operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Halt {
    /// It goes on.
    No,
    /// The store was unavailable past the outage budget: what it last
    /// said.
    Outage(String),
    /// No operation can run until someone changes something: why.
    Stop(String),
    /// This operation's record cannot be read (a corrupt row): why. A
    /// consumer stops, as for [`Halt::Stop`] (its message would come back
    /// to the same row); a job, which reads each operation once, counts it
    /// not run and goes on.
    Record(String),
    /// The ownership group's membership moved on: every claim from here
    /// would be refused, and what this member had is another's now.
    Deposed,
}

/// What an answer other than an execution comes to (`key`: the
/// operation's when it was derived, for notes on errors that carry none).
pub(crate) fn of_answer(begun: Result<Begin, EngineError>, key: Option<Digest>) -> Fate {
    match begun {
        Ok(Begin::Execute(_)) => unreachable!("executions are run, not answered"),
        Ok(Begin::Replay(r)) if r.state == RecordState::Completed => {
            Fate::new(End::Replayed, Then::Done)
        }
        Ok(Begin::Replay(_)) => Fate::new(End::ReplayedFailure, Then::Done),
        Ok(Begin::InProgress { retry_after_ms, .. }) => {
            Fate::new(End::InProgress, Then::Later(Delay::Hint(retry_after_ms)))
        }
        Ok(Begin::Conflict { key, reason, .. }) => Fate::new(End::Conflict, Then::Refused)
            .noted(format!("conflict on key {}: {reason}", key.digest)),
        Ok(Begin::Rejected {
            key,
            reason,
            marked_unknown: true,
            ..
        }) => Fate::new(
            End::SentToReview,
            Then::Review {
                key: key.clone(),
                reason: reason.clone(),
            },
        )
        .noted(format!("sent key {} to review: {reason}", key.digest)),
        Ok(Begin::Rejected {
            key,
            reason,
            retry_after_ms: Some(ms),
            ..
        }) => Fate::new(End::Rejected, Then::Later(Delay::Hint(Some(ms))))
            .noted(format!("rejected key {} for now: {reason}", key.digest)),
        Ok(Begin::Rejected { key, reason, .. }) => {
            let note = format!("rejected key {}: {reason}", key.digest);
            Fate::new(End::Rejected, Then::Rejected { key }).noted(note)
        }
        Err(e) => of_error(e, key),
    }
}

/// What an operation that could not be begun comes to: `e` says whose
/// fault that is, and so its fate.
pub(crate) fn of_error(e: EngineError, key: Option<Digest>) -> Fate {
    let key = key.map(|k| format!("key {k}: ")).unwrap_or_default();
    let not_run = |then| Fate::new(End::NotRun, then).noted(format!("{key}not run: {e}"));
    let refused = || Fate::new(End::Refused, Then::Refused).noted(format!("{key}refused: {e}"));
    let stop = || not_run(Then::Later(Delay::Now)).halting(Halt::Stop(e.to_string()));
    match &e {
        // The operation's own fault: the same answer every time.
        EngineError::Operation(_) | EngineError::Refused(_) => refused(),
        EngineError::Policy(_) => {
            Fate::new(End::PolicyFailed, Then::Refused).noted(format!("{key}on a duplicate, {e}"))
        }
        // Ownership moved on: another member's now, or this one's under the
        // new epoch.
        EngineError::Store(s @ StoreError::StaleEpoch { .. }) => {
            Fate::new(End::StaleEpoch, Then::Later(Delay::Retry))
                .noted(format!("not run, ownership moved on: {s}"))
        }
        EngineError::Store(s @ StoreError::Corrupt { .. }) => {
            not_run(Then::Later(Delay::Now)).halting(Halt::Record(s.to_string()))
        }
        EngineError::Store(s) => match s.class() {
            // The outage budget is spent (each claim rode it out).
            ErrorClass::Unavailable => {
                not_run(Then::Later(Delay::Retry)).halting(Halt::Outage(s.to_string()))
            }
            // The request itself: sent again, refused again.
            ErrorClass::Refused => refused(),
            // A lost race on the record: looked at again later.
            ErrorClass::Conflict => not_run(Then::Later(Delay::Retry)),
            // A store that cannot be opened, a schema this idem does not
            // know: waiting changes nothing, and no operation is to blame.
            ErrorClass::Failed => stop(),
        },
        EngineError::Fenced(_) => not_run(Then::Later(Delay::Retry)),
        // The policy may not claim in its namespace: no operation can run.
        EngineError::Unregistered(_) => stop(),
    }
}

/// What an operation whose effect this run held comes to (`key`: its key,
/// `lease`: its claim's).
pub(crate) fn of_execution(
    ran: Result<Performed, EngineError>,
    key: &str,
    lease: Duration,
) -> Fate {
    match ran {
        Ok(Performed::Completed) => Fate::new(End::Executed, Then::Done),
        Ok(Performed::Failed {
            retryable: false, ..
        }) => Fate::new(End::Failed, Then::Done),
        // Recorded failed-retryable: tried again, the policy decides.
        Ok(Performed::Failed { .. }) => Fate::new(End::Failed, Then::Later(Delay::Retry)),
        // The command cannot start: not the operation's fault (a command
        // missing, workers that keep dying), and the same for every one.
        // Its record is failed-retryable: run again when tried again.
        Ok(Performed::NotStarted { reason }) => Fate::new(End::Failed, Then::Later(Delay::Now))
            .noted(format!("key {key}: {reason}"))
            .halting(Halt::Stop(format!("the command cannot start: {reason}"))),
        // The claim lapses after its lease; tried again then, the policy
        // decides.
        Ok(Performed::Unknown { reason }) => {
            Fate::new(End::Unknown, Then::Later(Delay::Lease(lease)))
                .noted(format!("key {key}: {reason}; outcome unknown"))
        }
        // Deposed: the record is its taker's to settle.
        Err(EngineError::Fenced(e)) => Fate::new(End::Fenced, Then::Done)
            .noted(format!("deposed while running; result not recorded: {e}")),
        // The end could not be recorded: the outcome is unknown to the store.
        Err(e) => {
            let halt = if e.is_store_unavailable() {
                Halt::Outage(e.to_string())
            } else {
                Halt::No
            };
            Fate::new(End::Unknown, Then::Later(Delay::Lease(lease)))
                .noted(format!("key {key}: {e}"))
                .halting(halt)
        }
    }
}
