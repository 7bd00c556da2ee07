//! What a duplicate may get, and the gate that refuses an unsafe decision.
//!
//! A policy decides what a duplicate gets; the host checks the decision
//! against what is safe and fails closed. The gate is here, in plain Rust,
//! so that the native SDK harness and the wasm host refuse the same things.

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::operation::Operation;

/// Longest wait a policy may ask for.
pub const MAX_WAIT_MS: u64 = 60_000;
/// Longest rejection reason.
pub const MAX_REASON_BYTES: usize = 1024;

// Exhaustive on purpose (not `#[non_exhaustive]`): it mirrors the policy contract's
// (wit/policy.wit), which is versioned: a new variant is a new contract, and the host maps each
// variant to and from it, so a match must name them all. The stores keep the same set (a domain
// check in SQL).
/// The state of a stored record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RecordState {
    /// Claimed: a holder is performing the effect, or did until its lease
    /// expired.
    InProgress,
    /// The effect happened and its outcome is stored: final.
    Completed,
    /// The attempt failed and may be tried again.
    FailedRetryable,
    /// The attempt failed for good; the failure is stored: final.
    FailedPermanent,
    /// A holder's lease expired before it finished, and the policy sent the
    /// record to review: the effect may or may not have happened.
    OutcomeUnknown,
}

impl RecordState {
    /// The contract's spelling (`in-progress`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            RecordState::InProgress => "in-progress",
            RecordState::Completed => "completed",
            RecordState::FailedRetryable => "failed-retryable",
            RecordState::FailedPermanent => "failed-permanent",
            RecordState::OutcomeUnknown => "outcome-unknown",
        }
    }
}

impl std::str::FromStr for RecordState {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        serde_json::from_value(serde_json::Value::String(s.to_string())).map_err(|_| {
            format!("unknown record state `{s}`: expected in-progress, completed, failed-retryable, failed-permanent or outcome-unknown")
        })
    }
}

/// A summary of a stored outcome (never its bytes).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutcomeSummary {
    /// The caller's status: an exit code or an HTTP status.
    pub status: i32,
    /// Size of the stored outcome in bytes.
    #[serde(default)]
    pub size: u64,
    /// The error message of a failed attempt.
    #[serde(default)]
    pub error: Option<String>,
}

/// What the host knows about a duplicate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DuplicateContext {
    /// The new operation.
    pub operation: Operation,
    /// The state of the stored record it collided with.
    pub state: RecordState,
    /// Whether the new operation's fingerprint equals the stored one.
    pub fingerprint_matches: bool,
    /// Attempts made so far under this key (1 after the first claim).
    pub attempts: u32,
    /// Age of the stored record since it was created, by the store's clock.
    pub age_ms: u64,
    /// 0 when the lease has expired (or the record is not in progress).
    pub lease_remaining_ms: u64,
    /// The stored outcome of a completed or failed attempt, if any.
    pub outcome: Option<OutcomeSummary>,
}

/// A refusal returned to the caller.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Rejection {
    /// HTTP-style class, 400 to 599: 409 in progress, 422 mismatch, ...
    /// An `i32`, as every status is in idem's Rust API (see
    /// [`OutcomeSummary::status`]); the contract's `u16` is converted where
    /// a policy's decision is read.
    pub status: i32,
    /// Why, for the caller (1 to [`MAX_REASON_BYTES`] bytes).
    pub reason: String,
    /// When trying again may help, in milliseconds.
    pub retry_after_ms: Option<u64>,
}

// Exhaustive on purpose (not `#[non_exhaustive]`): it mirrors the policy contract's
// (wit/policy.wit), which is versioned: a new variant is a new contract, and the host maps each
// variant to and from it, so a match must name them all. The engine must act on every decision; a
// `_` arm would hide one it does not.
/// What a duplicate gets.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "decision")]
pub enum Decision {
    /// Hand back the stored outcome. Only for a completed (or permanently
    /// failed) record whose fingerprint matches.
    Replay,
    /// Refuse this duplicate.
    Reject(Rejection),
    /// Wait for an in-progress record whose lease is live.
    Wait {
        /// The longest wait, in milliseconds (1 to [`MAX_WAIT_MS`]).
        max_ms: u64,
    },
    /// Run the effect again under the same key. Only after a retryable
    /// failure, an expired lease or an unknown outcome, and only with a
    /// matching fingerprint.
    ReExecute,
    /// Mark an in-progress record whose lease expired as outcome-unknown for
    /// review, and refuse this duplicate.
    MarkUnknown(Rejection),
}

impl Decision {
    /// The contract's name of the decision (`replay`, `re-execute`, ...).
    pub fn name(&self) -> &'static str {
        match self {
            Decision::Replay => "replay",
            Decision::Reject(_) => "reject",
            Decision::Wait { .. } => "wait",
            Decision::ReExecute => "re-execute",
            Decision::MarkUnknown(_) => "mark-unknown",
        }
    }
}

/// A decision the host refuses: the duplicate is rejected instead (fail
/// closed), and the policy is reported as faulty.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("policy decided `{decision}` for {}{}: {why}", record_phrase(.state, *.lease_expired), if *.fingerprint_matches { "" } else { " with a different fingerprint" })]
pub struct UnsafeDecision {
    /// The decision refused, by its contract name (see [`Decision::name`]).
    pub decision: &'static str,
    /// The record's state, by its contract spelling (see
    /// [`RecordState::as_str`]).
    pub state: &'static str,
    /// Whether the duplicate's fingerprint matched the stored one.
    pub fingerprint_matches: bool,
    /// For an in-progress record: whether its lease had expired (what
    /// `wait`, `re-execute` and `mark-unknown` turn on).
    pub lease_expired: bool,
    /// Which rule the decision broke.
    pub why: &'static str,
}

/// `an in-progress record whose lease expired`, `a completed record`, …
fn record_phrase(state: &str, lease_expired: bool) -> String {
    let article = if state.starts_with(['a', 'e', 'i', 'o', 'u']) {
        "an"
    } else {
        "a"
    };
    let lease = match (state, lease_expired) {
        ("in-progress", true) => " whose lease expired",
        ("in-progress", false) => " whose lease is live",
        _ => "",
    };
    format!("{article} {state} record{lease}")
}

/// Checks a policy's decision against what is safe.
///
/// - `replay` only hands back an outcome that exists (completed or
///   permanently failed) to an operation with the same fingerprint;
/// - `re-execute` only after a retryable failure, an unknown outcome or an
///   expired lease, and never with a different fingerprint; a completed
///   record is never executed again;
/// - `wait` only for a record in progress whose lease is live, at most
///   [`MAX_WAIT_MS`];
/// - `mark-unknown` only for an in-progress record whose lease expired;
/// - a rejection carries a 4xx/5xx status and a reason.
pub fn check_decision(ctx: &DuplicateContext, decision: &Decision) -> Result<(), UnsafeDecision> {
    use RecordState::*;
    let expired = ctx.state == InProgress && ctx.lease_remaining_ms == 0;
    let refuse = |why: &'static str| {
        Err(UnsafeDecision {
            decision: decision.name(),
            state: ctx.state.as_str(),
            fingerprint_matches: ctx.fingerprint_matches,
            lease_expired: expired,
            why,
        })
    };
    let check_rejection = |r: &Rejection| {
        if !(400..=599).contains(&r.status) {
            return refuse("a rejection's status must be 400 to 599");
        }
        if r.reason.is_empty() || r.reason.len() > MAX_REASON_BYTES {
            return refuse("a rejection needs a reason of 1 to 1024 bytes");
        }
        Ok(())
    };
    match decision {
        Decision::Replay => {
            if !matches!(ctx.state, Completed | FailedPermanent) {
                return refuse("there is no final outcome to replay");
            }
            if !ctx.fingerprint_matches {
                return refuse("the stored outcome belongs to a different request");
            }
            Ok(())
        }
        Decision::ReExecute => {
            if matches!(ctx.state, Completed | FailedPermanent) {
                return refuse("a final record is never executed again");
            }
            if ctx.state == InProgress && !expired {
                return refuse("another holder's lease is still live");
            }
            if !ctx.fingerprint_matches {
                return refuse("re-executing would run a different request under the same key");
            }
            Ok(())
        }
        Decision::Wait { max_ms } => {
            if ctx.state != InProgress || expired {
                return refuse("waiting only makes sense for a live in-progress record");
            }
            if *max_ms == 0 || *max_ms > MAX_WAIT_MS {
                return refuse("a wait must be 1 to 60000 ms");
            }
            Ok(())
        }
        Decision::MarkUnknown(r) => {
            if !expired {
                return refuse(
                    "only an in-progress record whose lease expired can be marked outcome-unknown",
                );
            }
            check_rejection(r)
        }
        Decision::Reject(r) => check_rejection(r),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operation::OperationLimits;

    fn ctx(
        state: RecordState,
        fingerprint_matches: bool,
        lease_remaining_ms: u64,
    ) -> DuplicateContext {
        DuplicateContext {
            operation: Operation::from_json(
                r#"{"kind":"k","tenant":"t"}"#,
                &OperationLimits::default(),
            )
            .unwrap(),
            state,
            fingerprint_matches,
            attempts: 1,
            age_ms: 10,
            lease_remaining_ms,
            outcome: None,
        }
    }

    fn reject(status: i32) -> Rejection {
        Rejection {
            status,
            reason: "no".into(),
            retry_after_ms: None,
        }
    }

    #[test]
    fn the_safety_table() {
        use RecordState::*;
        let states = [
            InProgress,
            Completed,
            FailedRetryable,
            FailedPermanent,
            OutcomeUnknown,
        ];
        for state in states {
            for fp in [true, false] {
                for lease in [0u64, 5000] {
                    let c = ctx(state, fp, if state == InProgress { lease } else { 0 });
                    let expired = state == InProgress && c.lease_remaining_ms == 0;
                    let live = state == InProgress && !expired;
                    let ok = |d: Decision| check_decision(&c, &d).is_ok();
                    assert_eq!(
                        ok(Decision::Replay),
                        matches!(state, Completed | FailedPermanent) && fp,
                        "{state:?} {fp} replay"
                    );
                    assert_eq!(
                        ok(Decision::ReExecute),
                        fp && (matches!(state, FailedRetryable | OutcomeUnknown) || expired),
                        "{state:?} {fp} {lease} re-execute"
                    );
                    assert_eq!(ok(Decision::Wait { max_ms: 100 }), live, "{state:?} wait");
                    assert_eq!(
                        ok(Decision::MarkUnknown(reject(409))),
                        expired,
                        "{state:?} mark"
                    );
                    assert!(ok(Decision::Reject(reject(409))));
                }
            }
        }
    }

    #[test]
    fn a_completed_record_is_never_re_executed() {
        let err = check_decision(&ctx(RecordState::Completed, true, 0), &Decision::ReExecute)
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "policy decided `re-execute` for a completed record: a final record is never executed again"
        );
    }

    #[test]
    fn an_unsafe_wait_says_the_lease_had_expired() {
        let lapsed = ctx(RecordState::InProgress, true, 0);
        let err = check_decision(&lapsed, &Decision::Wait { max_ms: 100 }).unwrap_err();
        assert_eq!(
            err.to_string(),
            "policy decided `wait` for an in-progress record whose lease expired: waiting only makes sense for a live in-progress record"
        );
        let unknown = ctx(RecordState::OutcomeUnknown, false, 0);
        let err = check_decision(&unknown, &Decision::Replay).unwrap_err();
        assert!(
            err.to_string().starts_with(
                "policy decided `replay` for an outcome-unknown record with a different fingerprint"
            ),
            "{err}"
        );
    }

    #[test]
    fn rejections_and_waits_are_bounded() {
        let c = ctx(RecordState::InProgress, true, 1000);
        assert!(check_decision(&c, &Decision::Reject(reject(200))).is_err());
        assert!(check_decision(&c, &Decision::Reject(reject(600))).is_err());
        let empty = Rejection {
            status: 409,
            reason: String::new(),
            retry_after_ms: None,
        };
        assert!(check_decision(&c, &Decision::Reject(empty)).is_err());
        assert!(check_decision(&c, &Decision::Wait { max_ms: 0 }).is_err());
        assert!(
            check_decision(
                &c,
                &Decision::Wait {
                    max_ms: MAX_WAIT_MS + 1
                }
            )
            .is_err()
        );
    }
}
