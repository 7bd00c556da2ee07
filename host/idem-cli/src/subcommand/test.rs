//! `idem test`: a cases file against the built policy.

use std::path::PathBuf;
use std::time::Instant;

use clap::Args;
use idem::policy::{CodeSource, LoadedPolicy};
use idem_core::cases::{CasesFile, Subject, run_cases};
use idem_core::{Decision, Derivation, DuplicateContext, Operation, PolicyError, PolicyInfo};

use crate::exit::{Failure, INCOMPLETE, SUCCESS};
use crate::policy_args::PolicyArgs;

/// `idem test`'s flags.
#[derive(Args, Debug)]
pub struct TestArgs {
    #[command(flatten)]
    pub policy: PolicyArgs,
    /// The cases file (JSON); without it, the golden vectors the policy
    /// carries (the `cases.json` `idem build` found beside its crate).
    #[arg(value_name = "CASES.json")]
    pub cases: Option<PathBuf>,
}

/// The loaded component as a cases subject, recording what each call cost.
struct Wasm {
    policy: LoadedPolicy,
    max_fuel: u64,
    max_memory: usize,
}

impl Subject for Wasm {
    fn describe(&mut self) -> Result<PolicyInfo, String> {
        Ok(self.policy.info().clone())
    }

    fn derive(&mut self, op: &Operation) -> Result<Result<Derivation, PolicyError>, String> {
        let e = self.policy.derive_raw(op, 0).map_err(|e| e.to_string())?;
        self.max_fuel = self.max_fuel.max(e.fuel_used);
        self.max_memory = self.max_memory.max(e.memory_peak);
        Ok(e.value)
    }

    fn on_duplicate(&mut self, ctx: &DuplicateContext) -> Result<Decision, String> {
        let e = self
            .policy
            .on_duplicate_unchecked(ctx, 0)
            .map_err(|e| e.to_string())?;
        self.max_fuel = self.max_fuel.max(e.fuel_used);
        self.max_memory = self.max_memory.max(e.memory_peak);
        Ok(e.value)
    }
}

/// Runs `idem test`.
pub fn run(args: TestArgs) -> Result<u8, Failure> {
    let given = match &args.cases {
        Some(path) => Some(
            std::fs::read_to_string(path)
                .map_err(|e| Failure::input(format!("cannot read {}: {e}", path.display())))?,
        ),
        None => None,
    };
    let started = Instant::now();
    let policy = args.policy.load()?;
    let load_ms = started.elapsed().as_secs_f64() * 1e3;
    let (text, source) = match (&given, &args.cases) {
        (Some(text), Some(path)) => (text.as_str(), path.display().to_string()),
        _ => (
            policy.golden_cases().ok_or_else(|| {
                Failure::input(format!(
                    "{} carries no golden vectors (no cases.json beside its crate when it was built): name a cases file",
                    args.policy.policy.display()
                ))
            })?,
            "the policy's golden vectors".to_string(),
        ),
    };
    let file = CasesFile::from_json(text)
        .map_err(|e| Failure::input(format!("{source} is not a cases file: {e}")))?;
    let limits = policy.limits().clone();
    println!(
        "policy {} {} ({}), {} cases",
        policy.info().name,
        policy.info().version,
        policy.digest(),
        file.cases.len()
    );
    let mut subject = Wasm {
        policy,
        max_fuel: 0,
        max_memory: 0,
    };
    let report = run_cases(&mut subject, &file);
    for r in &report.results {
        let tag = if r.passed { "ok  " } else { "FAIL" };
        println!("{tag} {}: {}", r.name, r.detail);
    }
    let pct = |used: f64, limit: f64| {
        if limit > 0.0 {
            100.0 * used / limit
        } else {
            0.0
        }
    };
    println!(
        "resources: fuel {} max per call ({:.3}% of {}); memory {} KiB peak ({:.1}% of {} KiB); module {} KiB ({:.1}% of {} KiB); {} in {:.1} ms",
        subject.max_fuel,
        pct(subject.max_fuel as f64, limits.fuel as f64),
        limits.fuel,
        subject.max_memory / 1024,
        pct(subject.max_memory as f64, limits.memory_bytes as f64),
        limits.memory_bytes / 1024,
        subject.policy.size() / 1024,
        pct(
            subject.policy.size() as f64,
            limits.max_component_bytes as f64
        ),
        limits.max_component_bytes / 1024,
        match subject.policy.code_source() {
            CodeSource::Compiled => "compiled",
            CodeSource::Cache => "loaded from cache",
        },
        load_ms,
    );
    println!("{}", report.summary());
    Ok(if report.failed() == 0 && !report.results.is_empty() {
        SUCCESS
    } else {
        INCOMPLETE
    })
}
