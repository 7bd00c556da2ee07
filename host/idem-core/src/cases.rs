//! Cases files: one file of operations and expectations, run against a
//! policy natively (the SDK) and as a built component (`idem test`).
//!
//! ```json
//! {"cases": [
//!   {"name": "first charge", "op": {"kind": "charge", "tenant": "acme", "fields": {...}},
//!    "expect": {"key": "<64 hex>", "fingerprint": "<64 hex>", "partition": "c1"}},
//!   {"name": "retry keeps the key", "op": {...}, "expect": {"same_key_as": "first charge"}},
//!   {"name": "no customer", "op": {...}, "expect": {"error": "missing-field", "field": "customer"}},
//!   {"name": "completed replays", "op": {...},
//!    "duplicate": {"state": "completed", "fingerprint_matches": true},
//!    "expect": {"decision": "replay"}}
//! ]}
//! ```
//!
//! An operation without `now_ms` runs at logical time 0, so cases are
//! deterministic. An `expect` that checks nothing is an error: a case that
//! cannot fail proves nothing.

use std::collections::{HashMap, HashSet};

use serde::Deserialize;

use crate::derivation::{Derivation, KeyedDerivation, PolicyInfo};
use crate::digest::Digest;
use crate::duplicate::{Decision, DuplicateContext, OutcomeSummary, RecordState, check_decision};
use crate::operation::{Operation, OperationLimits};
use crate::policy_error::{ErrorCode, PolicyError};

/// A whole cases file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CasesFile {
    /// When given, the policy's `describe().name` must equal it.
    #[serde(default)]
    pub policy: Option<String>,
    /// The cases, run in order: a case may refer to an earlier one by name.
    pub cases: Vec<Case>,
}

impl CasesFile {
    /// Reads a cases file from JSON text. A member name repeated in one
    /// object is an error naming it (a case's operation must mean one
    /// thing, as everywhere in idem: [`crate::json`]).
    pub fn from_json(text: &str) -> Result<Self, serde_json::Error> {
        let file = serde_json::from_str(text)?;
        crate::json::unique_members(text.as_bytes())
            .map_err(<serde_json::Error as serde::de::Error>::custom)?;
        Ok(file)
    }
}

/// One case.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Case {
    /// Shown in the report, and how later cases refer to this one
    /// (`same_key_as`, ...).
    pub name: String,
    /// The operation, in the operation JSON format.
    pub op: crate::json::JsonValue,
    /// When present, the case asks `on-duplicate` instead of `derive`.
    #[serde(default)]
    pub duplicate: Option<DuplicateSpec>,
    /// What must hold for the case to pass.
    pub expect: Expect,
}

/// The stored record a duplicate case collides with.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DuplicateSpec {
    /// The stored record's state.
    pub state: RecordState,
    /// Whether the operation's fingerprint equals the stored one (default
    /// `true`).
    #[serde(default = "yes")]
    pub fingerprint_matches: bool,
    /// Attempts made so far under the key (default 1).
    #[serde(default = "one")]
    pub attempts: u32,
    /// Age of the stored record in milliseconds (default 0).
    #[serde(default)]
    pub age_ms: u64,
    /// Lease left in milliseconds (default 0: expired). Only an in-progress
    /// record has a lease; for any other state the policy is handed 0.
    #[serde(default)]
    pub lease_remaining_ms: u64,
    /// The stored outcome's summary, if any.
    #[serde(default)]
    pub outcome: Option<OutcomeSummary>,
}

fn yes() -> bool {
    true
}
fn one() -> u32 {
    1
}

/// What a case expects. Every member is optional; at least one must be set.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    /// The key, as 64 lowercase hex characters.
    pub key: Option<String>,
    /// The fingerprint, as 64 lowercase hex characters.
    pub fingerprint: Option<String>,
    /// The partition, exactly.
    pub partition: Option<String>,
    /// The retention, in seconds.
    pub retention_s: Option<u64>,
    /// The lease, in seconds.
    pub lease_s: Option<u32>,
    /// The key equals that of the named (earlier) case.
    pub same_key_as: Option<String>,
    /// The key differs from that of the named (earlier) case.
    pub key_differs_from: Option<String>,
    /// The fingerprint equals that of the named (earlier) case.
    pub same_fingerprint_as: Option<String>,
    /// The fingerprint differs from that of the named (earlier) case.
    pub fingerprint_differs_from: Option<String>,
    /// The policy refuses with this error code.
    pub error: Option<String>,
    /// ... naming this field.
    pub field: Option<String>,
    /// The host refuses the derivation as malformed.
    pub malformed: Option<bool>,
    /// The policy's decision for a duplicate (`replay`, `reject`, ...).
    pub decision: Option<String>,
    /// The rejection's status.
    pub status: Option<i32>,
    /// The rejection's `retry_after_ms`.
    pub retry_after_ms: Option<u64>,
    /// The decision is `wait` for exactly this many milliseconds.
    pub wait_ms: Option<u64>,
    /// The host's safety gate refuses the decision.
    #[serde(rename = "unsafe")]
    pub unsafe_decision: Option<bool>,
}

impl Expect {
    fn checks_something(&self) -> bool {
        let e = self;
        e.key.is_some()
            || e.fingerprint.is_some()
            || e.partition.is_some()
            || e.retention_s.is_some()
            || e.lease_s.is_some()
            || e.same_key_as.is_some()
            || e.key_differs_from.is_some()
            || e.same_fingerprint_as.is_some()
            || e.fingerprint_differs_from.is_some()
            || e.error.is_some()
            || e.malformed.is_some()
            || e.decision.is_some()
            || e.unsafe_decision.is_some()
    }
}

/// Something that can be asked what a policy says: the native SDK adapter or
/// a loaded component. `Err` is a failure to evaluate at all (a trap, a
/// limit), which always fails the case.
pub trait Subject {
    /// The policy's `describe`: who it says it is.
    fn describe(&mut self) -> Result<PolicyInfo, String>;
    /// The policy's `derive`, unchecked: the inner `Err` is the policy's own
    /// typed refusal.
    fn derive(&mut self, op: &Operation) -> Result<Result<Derivation, PolicyError>, String>;
    /// The policy's `on-duplicate`, before the safety gate.
    fn on_duplicate(&mut self, ctx: &DuplicateContext) -> Result<Decision, String>;
}

/// The result of one case.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaseResult {
    /// The case's name, or `describe` when the policy failed to describe
    /// itself.
    pub name: String,
    /// Whether everything the case expects held.
    pub passed: bool,
    /// On success a short summary; on failure what differed.
    pub detail: String,
}

/// The results of a whole file.
#[derive(Debug, Clone, Default)]
pub struct CasesReport {
    /// One result per case, in file order. A policy that cannot describe
    /// itself (or is not the file's policy) gets a single failed
    /// `describe` result instead.
    pub results: Vec<CaseResult>,
}

impl CasesReport {
    /// How many cases passed.
    pub fn passed(&self) -> usize {
        self.results.iter().filter(|r| r.passed).count()
    }
    /// How many cases failed.
    pub fn failed(&self) -> usize {
        self.results.len() - self.passed()
    }
    /// The closing line: `N passed, N failed`.
    pub fn summary(&self) -> String {
        format!("{} passed, {} failed", self.passed(), self.failed())
    }
}

/// Runs every case of `file` against `subject`.
pub fn run_cases(subject: &mut dyn Subject, file: &CasesFile) -> CasesReport {
    let mut report = CasesReport::default();
    let info = match subject.describe() {
        Ok(info) => info,
        Err(e) => {
            report.results.push(CaseResult {
                name: "describe".into(),
                passed: false,
                detail: e,
            });
            return report;
        }
    };
    if let Err(e) = info.validate() {
        report.results.push(CaseResult {
            name: "describe".into(),
            passed: false,
            detail: e.to_string(),
        });
        return report;
    }
    if let Some(want) = &file.policy
        && *want != info.name
    {
        report.results.push(CaseResult {
            name: "describe".into(),
            passed: false,
            detail: format!("the cases are for policy `{want}`, this is `{}`", info.name),
        });
        return report;
    }
    // Every key a case derived, passing or not: a case that got its own
    // expectations wrong still has a key, and the cases comparing theirs
    // with it are judged on their own (one mistake, one failing case).
    let mut seen: HashMap<String, KeyedDerivation> = HashMap::new();
    let mut failed: HashSet<&str> = HashSet::new();
    for case in &file.cases {
        let (outcome, keyed) = run_case(subject, &info, case, &seen, &failed);
        if let Some(k) = keyed {
            seen.insert(case.name.clone(), k);
        }
        let (passed, detail) = match outcome {
            Ok(detail) => (true, detail),
            Err(detail) => {
                failed.insert(case.name.as_str());
                (false, detail)
            }
        };
        report.results.push(CaseResult {
            name: case.name.clone(),
            passed,
            detail,
        });
    }
    report
}

/// A case's verdict (a summary, or what differed), and the key it derived
/// if it derived one, passing or not.
type CaseOutcome = (Result<String, String>, Option<KeyedDerivation>);

fn run_case(
    subject: &mut dyn Subject,
    info: &PolicyInfo,
    case: &Case,
    seen: &HashMap<String, KeyedDerivation>,
    failed: &HashSet<&str>,
) -> CaseOutcome {
    let e = &case.expect;
    let mut op = match Operation::from_value(case.op.clone(), &OperationLimits::default()) {
        Ok(op) => op,
        Err(err) => return (Err(format!("the case's op is invalid: {err}")), None),
    };
    op.now_ms.get_or_insert(0);
    if !e.checks_something() {
        // Still derive its key: the cases that compare theirs with it are
        // judged on their own (one mistake, one failing case).
        let keyed = match &case.duplicate {
            None => derive_case(subject, info, &op, e, seen, failed).1,
            Some(_) => None,
        };
        return (
            Err("`expect` checks nothing; say what must hold".into()),
            keyed,
        );
    }
    match &case.duplicate {
        None => derive_case(subject, info, &op, e, seen, failed),
        Some(dup) => (duplicate_case(subject, op, dup, e), None),
    }
}

fn derive_case(
    subject: &mut dyn Subject,
    info: &PolicyInfo,
    op: &Operation,
    e: &Expect,
    seen: &HashMap<String, KeyedDerivation>,
    failed: &HashSet<&str>,
) -> CaseOutcome {
    match derive_checked(subject, info, op, e, seen, failed) {
        Ok((detail, keyed)) => (Ok(detail), keyed),
        Err((detail, keyed)) => (Err(detail), keyed),
    }
}

/// [`derive_case`] with `?`: a failure may still carry the derived key.
// Once per case of a cases file: the error's size costs nothing.
#[allow(clippy::result_large_err)]
fn derive_checked(
    subject: &mut dyn Subject,
    info: &PolicyInfo,
    op: &Operation,
    e: &Expect,
    seen: &HashMap<String, KeyedDerivation>,
    failed: &HashSet<&str>,
) -> Result<(String, Option<KeyedDerivation>), (String, Option<KeyedDerivation>)> {
    let no_key = |detail: String| (detail, None);
    let derived = subject.derive(op).map_err(no_key)?;
    if let Some(code) = &e.error {
        let want: ErrorCode = code.parse().map_err(no_key)?;
        return match derived {
            Ok(_) => Err(no_key(format!("expected policy error {code}, got a key"))),
            Err(err) if err.code != want => {
                Err(no_key(format!("expected policy error {code}, got {err}")))
            }
            Err(err) if e.field.is_some() && err.field != e.field => Err(no_key(format!(
                "expected the error to name field {:?}, got {err}",
                e.field
            ))),
            Err(err) => Ok((format!("refused: {err}"), None)),
        };
    }
    let derivation =
        derived.map_err(|err| no_key(format!("expected a key, got policy error {err}")))?;
    let keyed = match (derivation.finish(&info.namespace), e.malformed) {
        (Err(err), Some(true)) => return Ok((err.to_string(), None)),
        (Err(err), _) => return Err(no_key(err.to_string())),
        (Ok(k), Some(true)) => {
            return Err((
                "expected the host to refuse the derivation, it was accepted".into(),
                Some(k),
            ));
        }
        (Ok(k), _) => k,
    };
    let mut problems = Vec::new();
    let mut check_hex = |what: &str, want: &Option<String>, got: &Digest| {
        if let Some(w) = want
            && *w != got.to_hex()
        {
            problems.push(format!("{what}: expected {w}, got {got}"));
        }
    };
    check_hex("key", &e.key, &keyed.key);
    check_hex("fingerprint", &e.fingerprint, &keyed.fingerprint);
    if let Some(p) = &e.partition
        && *p != keyed.partition
    {
        problems.push(format!(
            "partition: expected {p:?}, got {:?}",
            keyed.partition
        ));
    }
    if let Some(r) = e.retention_s
        && r != keyed.retention_s
    {
        problems.push(format!(
            "retention_s: expected {r}, got {}",
            keyed.retention_s
        ));
    }
    if let Some(l) = e.lease_s
        && l != keyed.lease_s
    {
        problems.push(format!("lease_s: expected {l}, got {}", keyed.lease_s));
    }
    let relations: [(&Option<String>, bool, bool); 4] = [
        (&e.same_key_as, true, true),
        (&e.key_differs_from, true, false),
        (&e.same_fingerprint_as, false, true),
        (&e.fingerprint_differs_from, false, false),
    ];
    let mut missing: Vec<&str> = Vec::new();
    for (other, is_key, want_equal) in relations {
        let Some(other) = other else { continue };
        let Some(theirs) = seen.get(other) else {
            // Said once per case named, however many relations name it.
            if missing.contains(&other.as_str()) {
                continue;
            }
            missing.push(other);
            problems.push(if failed.contains(other.as_str()) {
                format!("case {other:?} failed without deriving a key to compare with")
            } else {
                format!("no earlier case named {other:?} with a key")
            });
            continue;
        };
        let (mine, theirs, what) = if is_key {
            (keyed.key, theirs.key, "key")
        } else {
            (keyed.fingerprint, theirs.fingerprint, "fingerprint")
        };
        if (mine == theirs) != want_equal {
            let rel = if want_equal { "equal" } else { "differ from" };
            problems.push(format!(
                "{what} should {rel} that of {other:?} ({mine} vs {theirs})"
            ));
        }
    }
    if problems.is_empty() {
        Ok((format!("key {}…", &keyed.key.to_hex()[..16]), Some(keyed)))
    } else {
        Err((problems.join("; "), Some(keyed)))
    }
}

fn duplicate_case(
    subject: &mut dyn Subject,
    operation: Operation,
    dup: &DuplicateSpec,
    e: &Expect,
) -> Result<String, String> {
    let ctx = DuplicateContext {
        operation,
        state: dup.state,
        fingerprint_matches: dup.fingerprint_matches,
        attempts: dup.attempts,
        age_ms: dup.age_ms,
        lease_remaining_ms: if dup.state == RecordState::InProgress {
            dup.lease_remaining_ms
        } else {
            0
        },
        outcome: dup.outcome.clone(),
    };
    const DECISIONS: [&str; 5] = ["replay", "reject", "wait", "re-execute", "mark-unknown"];
    if let Some(want) = &e.decision
        && !DECISIONS.contains(&want.as_str())
    {
        return Err(format!(
            "unknown decision `{want}` in `expect`: expected {}",
            DECISIONS.join(", ")
        ));
    }
    let decision = subject.on_duplicate(&ctx)?;
    let gate = check_decision(&ctx, &decision);
    let mut problems = Vec::new();
    match (e.unsafe_decision, &gate) {
        (Some(true), Ok(())) => problems.push(format!(
            "expected the host to refuse `{}`, it was allowed",
            decision.name()
        )),
        (Some(false) | None, Err(err)) => {
            problems.push(format!("the host refused the decision: {err}"))
        }
        _ => {}
    }
    if let Some(want) = &e.decision
        && want != decision.name()
    {
        problems.push(format!(
            "decision: expected {want}, got {}",
            decision.name()
        ));
    }
    let rejection = match &decision {
        Decision::Reject(r) | Decision::MarkUnknown(r) => Some(r),
        _ => None,
    };
    if let Some(status) = e.status {
        match rejection {
            Some(r) if r.status == status => {}
            Some(r) => problems.push(format!("status: expected {status}, got {}", r.status)),
            None => problems.push(format!(
                "status: expected {status}, but `{}` has none",
                decision.name()
            )),
        }
    }
    if let Some(after) = e.retry_after_ms {
        let got = rejection.and_then(|r| r.retry_after_ms);
        if got != Some(after) {
            problems.push(format!("retry_after_ms: expected {after}, got {got:?}"));
        }
    }
    if let Some(wait) = e.wait_ms {
        match decision {
            Decision::Wait { max_ms } if max_ms == wait => {}
            _ => problems.push(format!("wait_ms: expected wait {wait}, got {decision:?}")),
        }
    }
    if problems.is_empty() {
        Ok(match gate {
            Ok(()) => decision.name().to_string(),
            Err(err) => format!("refused as expected: {err}"),
        })
    } else {
        Err(problems.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::CasesFile;

    #[test]
    fn a_repeated_member_in_a_case_is_refused() {
        let good = r#"{"cases":[{"name":"a","op":{"kind":"k","tenant":"t","fields":{"x":"1"}},"expect":{"partition":"p"}}]}"#;
        assert!(CasesFile::from_json(good).is_ok());
        let twice = r#"{"cases":[{"name":"a","op":{"kind":"k","tenant":"t","fields":{"x":"1","x":"2"}},"expect":{"partition":"p"}}]}"#;
        let err = CasesFile::from_json(twice).unwrap_err().to_string();
        assert!(
            err.contains("member `cases[0].op.fields.x` appears twice"),
            "{err}"
        );
    }
}
