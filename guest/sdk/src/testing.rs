//! Native testing: run a policy's cases file with plain `cargo test`.
//!
//! The conversions below hand the policy exactly what the host hands the
//! built component (the same canonical operation), and keys are computed by
//! the same code the host uses (`idem-core`), so a cases file that passes
//! here passes under `idem test` against the `.wasm`.

use std::marker::PhantomData;
use std::path::Path;

pub use idem_core;
use idem_core::cases::{CasesFile, CasesReport, Subject, run_cases as run_core_cases};
use idem_core::{KeyedDerivation, OperationLimits};

use crate::{Field, Policy, Trigger};

/// Runs a cases file against `P` natively.
pub fn run_cases<P: Policy>(file: &CasesFile) -> CasesReport {
    run_core_cases(&mut Native::<P>(PhantomData), file)
}

/// Reads the cases file at `path` (relative paths are relative to the
/// crate's manifest directory when run by cargo) and panics with every
/// failing case if any fails. For a policy's unit tests.
pub fn assert_cases<P: Policy>(path: impl AsRef<Path>) {
    let path = path.as_ref();
    let path = match std::env::var_os("CARGO_MANIFEST_DIR") {
        Some(dir) if path.is_relative() => Path::new(&dir).join(path),
        _ => path.to_path_buf(),
    };
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let file = CasesFile::from_json(&text)
        .unwrap_or_else(|e| panic!("{} is not a cases file: {e}", path.display()));
    let report = run_cases::<P>(&file);
    let failures: Vec<String> = report
        .results
        .iter()
        .filter(|r| !r.passed)
        .map(|r| format!("  FAIL {}: {}", r.name, r.detail))
        .collect();
    assert!(
        failures.is_empty(),
        "{}: {}\n{}",
        path.display(),
        report.summary(),
        failures.join("\n")
    );
    assert!(
        !report.results.is_empty(),
        "{} has no cases",
        path.display()
    );
}

/// Derives the key for one operation (JSON) natively, as the host would.
pub fn derive_key<P: Policy>(op_json: &str) -> Result<KeyedDerivation, String> {
    let mut op = idem_core::Operation::from_json(op_json, &OperationLimits::default())
        .map_err(|e| e.to_string())?;
    op.now_ms.get_or_insert(0);
    derive_native::<P>(&op)
}

/// Derives the key for a canonical operation natively (what the host does
/// with the component, minus the sandbox). Used by benchmarks as the floor.
pub fn derive_native<P: Policy>(op: &idem_core::Operation) -> Result<KeyedDerivation, String> {
    let info = P::describe();
    let derivation =
        P::derive(&to_guest_operation(op)).map_err(|e| from_guest_error(e).to_string())?;
    from_guest_derivation(derivation)
        .finish(&info.namespace)
        .map_err(|e| e.to_string())
}

struct Native<P>(PhantomData<P>);

impl<P: Policy> Subject for Native<P> {
    fn describe(&mut self) -> Result<idem_core::PolicyInfo, String> {
        let i = P::describe();
        Ok(idem_core::PolicyInfo {
            name: i.name,
            version: i.version,
            namespace: i.namespace,
            description: i.description,
        })
    }

    fn derive(
        &mut self,
        op: &idem_core::Operation,
    ) -> Result<Result<idem_core::Derivation, idem_core::PolicyError>, String> {
        Ok(P::derive(&to_guest_operation(op))
            .map(from_guest_derivation)
            .map_err(from_guest_error))
    }

    fn on_duplicate(
        &mut self,
        ctx: &idem_core::DuplicateContext,
    ) -> Result<idem_core::Decision, String> {
        Ok(from_guest_decision(P::on_duplicate(&to_guest_context(ctx))))
    }
}

/// The operation exactly as the host hands it to a component.
pub fn to_guest_operation(op: &idem_core::Operation) -> crate::Operation {
    crate::Operation {
        kind: op.kind.clone(),
        tenant: op.tenant.clone(),
        fields: op
            .fields
            .iter()
            .map(|(name, value)| Field {
                name: name.clone(),
                value: match value {
                    idem_core::Value::Text(t) => crate::Value::Text(t.clone()),
                    idem_core::Value::Number(n) => crate::Value::Number(n.clone()),
                    idem_core::Value::Boolean(b) => crate::Value::Boolean(*b),
                },
            })
            .collect(),
        run: op.run.as_ref().map(|r| crate::RunContext {
            run_id: r.run_id.clone(),
            trigger: match r.trigger {
                idem_core::Trigger::Scheduled => Trigger::Scheduled,
                idem_core::Trigger::Retry => Trigger::Retry,
                idem_core::Trigger::Manual => Trigger::Manual,
                idem_core::Trigger::Client => Trigger::Client,
            },
            attempt: r.attempt,
        }),
        now_ms: op.now_ms.unwrap_or(0),
    }
}

fn to_guest_context(ctx: &idem_core::DuplicateContext) -> crate::DuplicateContext {
    use idem_core::RecordState as S;
    crate::DuplicateContext {
        operation: to_guest_operation(&ctx.operation),
        state: match ctx.state {
            S::InProgress => crate::RecordState::InProgress,
            S::Completed => crate::RecordState::Completed,
            S::FailedRetryable => crate::RecordState::FailedRetryable,
            S::FailedPermanent => crate::RecordState::FailedPermanent,
            S::OutcomeUnknown => crate::RecordState::OutcomeUnknown,
        },
        fingerprint_matches: ctx.fingerprint_matches,
        attempts: ctx.attempts,
        age_ms: ctx.age_ms,
        lease_remaining_ms: ctx.lease_remaining_ms,
        outcome: ctx.outcome.as_ref().map(|o| crate::OutcomeSummary {
            status: o.status,
            size: o.size,
            error: o.error.clone(),
        }),
    }
}

fn from_guest_derivation(d: crate::Derivation) -> idem_core::Derivation {
    let parts = |ps: Vec<crate::Part>| {
        ps.into_iter()
            .map(|p| idem_core::Part::new(p.name, p.value))
            .collect()
    };
    idem_core::Derivation {
        key: parts(d.key),
        fingerprint: parts(d.fingerprint),
        partition: d.partition,
        retention_s: d.retention_s,
        lease_s: d.lease_s,
    }
}

fn from_guest_error(e: crate::PolicyError) -> idem_core::PolicyError {
    idem_core::PolicyError {
        code: match e.code {
            crate::ErrorCode::MissingField => idem_core::ErrorCode::MissingField,
            crate::ErrorCode::InvalidValue => idem_core::ErrorCode::InvalidValue,
            crate::ErrorCode::UnsupportedKind => idem_core::ErrorCode::UnsupportedKind,
        },
        field: e.field,
        message: e.message,
    }
}

fn from_guest_decision(d: crate::Decision) -> idem_core::Decision {
    let rejection = |r: crate::Rejection| idem_core::Rejection {
        status: r.status,
        reason: r.reason,
        retry_after_ms: r.retry_after_ms,
    };
    match d {
        crate::Decision::Replay => idem_core::Decision::Replay,
        crate::Decision::Reject(r) => idem_core::Decision::Reject(rejection(r)),
        crate::Decision::Wait(ms) => idem_core::Decision::Wait { max_ms: ms },
        crate::Decision::ReExecute => idem_core::Decision::ReExecute,
        crate::Decision::MarkUnknown(r) => idem_core::Decision::MarkUnknown(rejection(r)),
    }
}
