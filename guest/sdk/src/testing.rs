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
    // One line per case, as `idem test` prints them (cargo shows them with
    // `--nocapture`, and for a failing test).
    println!("{}: {} cases", path.display(), report.results.len());
    for r in &report.results {
        let tag = if r.passed { "ok  " } else { "FAIL" };
        println!("{tag} {}: {}", r.name, r.detail);
    }
    println!("{}", report.summary());
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

/// Builds this crate into a component (`idem build`) and runs the cases
/// file at `path` against it with the host's own runner (`idem test`),
/// panicking with the report if a case fails. Natively and in the host a
/// policy can differ (a `static` that keeps its value across native calls
/// but not across the host's fresh instances, NaN bit patterns, a
/// dependency that behaves differently on wasm): call it beside
/// [`assert_cases`], so that "passes natively" cannot hide "fails in the
/// host". `idem` is `$IDEM_BIN`, else the `idem` on `PATH`; without one the
/// test says it was skipped (and fails under `CI=true`, where skipping
/// silently would hide exactly this).
pub fn assert_cases_in_host(path: impl AsRef<Path>) {
    use std::process::Command;
    let dir = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(std::path::PathBuf::from)
        .expect("CARGO_MANIFEST_DIR: run this from `cargo test`");
    let path = dir.join(path.as_ref());
    let idem = std::env::var_os("IDEM_BIN").unwrap_or_else(|| "idem".into());
    let built = match Command::new(&idem).arg("build").arg(&dir).output() {
        Ok(out) => out,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
            assert!(
                !ci,
                "`{}` not found and CI=true: set IDEM_BIN or put idem on PATH",
                idem.to_string_lossy()
            );
            println!(
                "SKIPPED the cases in the host: `{}` not found (set IDEM_BIN or put idem on PATH)",
                idem.to_string_lossy()
            );
            return;
        }
        Err(e) => panic!("cannot run `{}`: {e}", idem.to_string_lossy()),
    };
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    assert!(
        built.status.success(),
        "idem build {} failed:\n{}",
        dir.display(),
        text(&built.stderr)
    );
    let component = text(&built.stdout).trim().to_string();
    let tested = Command::new(&idem)
        .args(["test", "--policy", &component])
        .arg(&path)
        .output()
        .unwrap_or_else(|e| panic!("cannot run `{}`: {e}", idem.to_string_lossy()));
    let report = text(&tested.stdout);
    println!("{report}");
    assert!(
        tested.status.success(),
        "{} against the built component {component}:\n{report}{}",
        path.display(),
        text(&tested.stderr)
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
        let op = to_guest_operation(op);
        contained("derive", || {
            P::derive(&op)
                .map(from_guest_derivation)
                .map_err(from_guest_error)
        })
    }

    fn on_duplicate(
        &mut self,
        ctx: &idem_core::DuplicateContext,
    ) -> Result<idem_core::Decision, String> {
        let ctx = to_guest_context(ctx);
        contained("on-duplicate", || {
            from_guest_decision(P::on_duplicate(&ctx))
        })
    }
}

/// Runs one policy call natively; a panic fails that case alone (as a trap
/// fails one call of the component in the host) instead of the whole test.
fn contained<T>(call: &str, f: impl FnOnce() -> T) -> Result<T, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|payload| {
        let message = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic without a message".into());
        format!("the policy panicked in {call} (in the host: a trap): {message}")
    })
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
        status: i32::from(r.status),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Decision, Derivation, DuplicateContext, Operation, PolicyError, PolicyInfo};

    /// Panics on the invoice `boom`; keys by invoice otherwise.
    struct Fragile;

    impl Policy for Fragile {
        fn describe() -> PolicyInfo {
            PolicyInfo::new("fragile", "1.0.0", "fragile", "panics on one invoice")
        }
        fn derive(op: &Operation) -> Result<Derivation, PolicyError> {
            let invoice = op.text("invoice")?;
            assert!(invoice != "boom", "invoice boom is not supported");
            Ok(Derivation::new(invoice).key("invoice", invoice))
        }
        fn on_duplicate(_: &DuplicateContext) -> Decision {
            panic!("no duplicates here")
        }
    }

    fn op(invoice: &str) -> serde_json::Value {
        serde_json::json!({"kind": "charge", "tenant": "t", "fields": {"invoice": invoice}})
    }

    /// A panicking case fails alone, named as a panic; the cases after it
    /// run and pass; a case whose own expectation is wrong still lends its
    /// key to the cases comparing with it.
    #[test]
    fn a_panic_or_a_wrong_expectation_fails_one_case_only() {
        let file = CasesFile::from_json(
            &serde_json::json!({"cases": [
                {"name": "wrong expected key", "op": op("a"), "expect": {"key": "00".repeat(32)}},
                {"name": "same as the wrong one", "op": op("a"), "expect": {"same_key_as": "wrong expected key"}},
                {"name": "panics", "op": op("boom"), "expect": {"partition": "boom"}},
                {"name": "after the panic", "op": op("b"), "expect": {"partition": "b"}},
                {"name": "compares with the panic", "op": op("b"), "expect": {"same_key_as": "panics"}},
                {"name": "duplicate panics", "op": op("c"),
                 "duplicate": {"state": "completed", "fingerprint_matches": true},
                 "expect": {"decision": "replay"}},
            ]})
            .to_string(),
        )
        .unwrap();
        let report = run_cases::<Fragile>(&file);
        let verdicts: Vec<(&str, bool)> = report
            .results
            .iter()
            .map(|r| (r.name.as_str(), r.passed))
            .collect();
        assert_eq!(
            verdicts,
            [
                ("wrong expected key", false),
                ("same as the wrong one", true),
                ("panics", false),
                ("after the panic", true),
                ("compares with the panic", false),
                ("duplicate panics", false),
            ]
        );
        let detail = |i: usize| report.results[i].detail.as_str();
        assert!(
            detail(2).contains("panicked in derive") && detail(2).contains("boom is not supported"),
            "{}",
            detail(2)
        );
        assert!(
            detail(4).contains("failed without deriving a key"),
            "{}",
            detail(4)
        );
        assert!(
            detail(5).contains("panicked in on-duplicate"),
            "{}",
            detail(5)
        );
    }
}
