//! Every exit status `idem` chooses, in one place, and the failure type that
//! carries one to `main`.
//!
//! Two families. The small codes (0–4) are idem's own, shared by every
//! subcommand. The codes from 64 up are sysexits(3) values, used where a
//! caller (a shell script, a scheduler) should tell "try later" from "do not
//! retry"; `idem exec` returns them only when it did not run the command,
//! since a command it ran or replayed lends `idem exec` its own status
//! ([`from_status`]). clap's usage errors exit with [`BAD_INPUT`] too.

use idem::engine::EngineError;

/// Everything asked was done.
pub const SUCCESS: u8 = 0;

/// The command ran but not everything succeeded: a case failed (`idem
/// test`), some operations did not complete (`idem run`), or the record
/// asked for does not exist (`idem inspect KEY`).
pub const INCOMPLETE: u8 = 1;

/// `idem diff`: a key within retention would change under the new version
/// (the same status as [`INCOMPLETE`]: the upgrade is not safe as it is).
pub const KEYS_WOULD_CHANGE: u8 = INCOMPLETE;

/// Bad usage or input: an unreadable file, a malformed operation, a policy
/// or store that cannot be opened, a command that cannot be started, a run
/// or consumer that stopped because no operation could run. Also clap's
/// own status for a usage error.
pub const BAD_INPUT: u8 = 2;

/// The policy refused the operation: a typed policy error (printed as JSON
/// by `idem key`).
pub const POLICY_REFUSED: u8 = 3;

/// The policy failed while evaluating: a trap, fuel, memory, the deadline,
/// malformed output or an unsafe decision.
pub const POLICY_FAILED: u8 = 4;

/// `idem exec`: the key was used for a different request (a fingerprint
/// conflict). sysexits' EX_DATAERR.
pub const CONFLICT: u8 = 65;

/// `idem run` and `idem exec`: the store was unavailable for longer than
/// `--store-outage`, so no more operations were started (`idem run` counts
/// those `not run`; `idem exec` did not run its command): none of their
/// effects happened, and a re-run does them. sysexits' EX_UNAVAILABLE.
pub const STORE_UNAVAILABLE: u8 = 69;

/// `idem exec`: the command was killed by a signal, or it ran and its
/// outcome could not be recorded (the store stayed unavailable past
/// `--store-outage`), so whether its effect happened is unknown to the
/// store; the claim stays until its lease expires, then the policy decides.
/// sysexits' EX_SOFTWARE.
pub const OUTCOME_UNKNOWN: u8 = 70;

/// Try later: `idem exec` found the operation in progress elsewhere.
/// sysexits' EX_TEMPFAIL.
pub const TRY_LATER: u8 = 75;

/// `idem run --job-lease NAME` found the lease held by another live run and
/// did nothing. The same status as [`TRY_LATER`], on purpose: to a
/// scheduler both mean "someone else is doing this; come back later".
pub const JOB_LEASE_HELD: u8 = TRY_LATER;

/// `idem exec`: this run was deposed (its claim taken over) while the
/// command ran, and its result was not recorded. sysexits' EX_PROTOCOL.
pub const DEPOSED: u8 = 76;

/// `idem exec`: the policy rejected the duplicate (e.g. an unknown outcome
/// sent to review). sysexits' EX_NOPERM.
pub const REJECTED: u8 = 77;

/// The exit status that reports a command's stored status (`idem exec`
/// exits with its command's status, also when replaying it). Statuses
/// outside 0..=255 cannot be an exit status and become [`INCOMPLETE`].
pub fn from_status(status: i32) -> u8 {
    u8::try_from(status).unwrap_or(INCOMPLETE)
}

/// A command's failure: the message for stderr and the exit status.
pub struct Failure {
    /// One of the constants above.
    pub code: u8,
    /// Printed to stderr after `idem: `.
    pub message: String,
}

impl Failure {
    /// Bad usage or input ([`BAD_INPUT`]).
    pub fn input(message: impl std::fmt::Display) -> Self {
        Failure {
            code: BAD_INPUT,
            message: message.to_string(),
        }
    }
}

/// The exit status and message for an engine error.
pub fn engine_failure(e: EngineError) -> Failure {
    let code = match &e {
        EngineError::Operation(_) | EngineError::Store(_) | EngineError::Unregistered(_) => {
            BAD_INPUT
        }
        EngineError::Refused(_) => POLICY_REFUSED,
        EngineError::Policy(_) => POLICY_FAILED,
        EngineError::Fenced(_) => DEPOSED,
        // An error this idem does not know (`EngineError` is non-exhaustive).
        _ => BAD_INPUT,
    };
    Failure {
        code,
        message: e.to_string(),
    }
}
