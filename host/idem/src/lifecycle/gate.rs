//! The activation gate: a policy's own golden vectors (the cases file it
//! carries in its `idem-cases` section, or one shipped beside it) must pass
//! before the version may become active. A failing case is named.

use idem_core::cases::{CasesFile, CasesReport, Subject, run_cases};
use idem_core::{Decision, Derivation, DuplicateContext, Operation, PolicyError, PolicyInfo};
use thiserror::Error;

use crate::policy::LoadedPolicy;

/// Why a policy may not become active.
#[derive(Debug, Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum GateError {
    /// Its vectors are not a cases file.
    #[error("its golden vectors are not a cases file: {0}")]
    Unreadable(String),
    /// A vector failed: the version does not do what it says it does.
    #[error(
        "it fails its own golden vectors: case `{case}`: {detail} ({failed} of {total} failed)"
    )]
    Failed {
        /// The first failing case's name.
        case: String,
        /// What differed.
        detail: String,
        /// How many cases failed.
        failed: usize,
        /// How many there are.
        total: usize,
    },
}

/// A loaded policy as a cases subject: the same evaluation as `idem test`
/// (logical time 0, as the cases file's own times say otherwise).
pub struct PolicySubject<'a>(pub &'a LoadedPolicy);

impl Subject for PolicySubject<'_> {
    fn describe(&mut self) -> Result<PolicyInfo, String> {
        Ok(self.0.info().clone())
    }

    fn derive(&mut self, op: &Operation) -> Result<Result<Derivation, PolicyError>, String> {
        Ok(self.0.derive_raw(op, 0).map_err(|e| e.to_string())?.value)
    }

    fn on_duplicate(&mut self, ctx: &DuplicateContext) -> Result<Decision, String> {
        Ok(self
            .0
            .on_duplicate_unchecked(ctx, 0)
            .map_err(|e| e.to_string())?
            .value)
    }
}

/// Runs the policy's golden vectors: `beside` (a cases file's text shipped
/// next to the component) when given, else the ones it carries. `Ok(None)`
/// when it has none (nothing to check: the caller says so); `Ok(report)`
/// when every case passed.
pub fn run_golden_vectors(
    policy: &LoadedPolicy,
    beside: Option<&str>,
) -> Result<Option<CasesReport>, GateError> {
    let Some(text) = beside.or(policy.golden_cases()) else {
        return Ok(None);
    };
    let file = CasesFile::from_json(text).map_err(|e| GateError::Unreadable(e.to_string()))?;
    let report = run_cases(&mut PolicySubject(policy), &file);
    if let Some(first) = report.results.iter().find(|r| !r.passed) {
        return Err(GateError::Failed {
            case: first.name.clone(),
            detail: first.detail.clone(),
            failed: report.failed(),
            total: report.results.len(),
        });
    }
    Ok(Some(report))
}
