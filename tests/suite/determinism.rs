//! What a JavaScript or Python policy sees of time and chance inside the
//! sandbox, where it has no clock and no randomness (it imports nothing):
//! the values the book states, checked on built components, and a policy
//! that lets them into its key caught by its golden vectors.
//!
//! - JavaScript: `Date.now()` is the moment the component was built (frozen
//!   in its snapshot) and `Math.random()` the same number in every fresh
//!   instance; so two builds of one source derive different keys.
//! - Python: `random.random()` is fixed at build time; `time.time()` traps,
//!   and that evaluation fails alone.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

use idem::core::{Operation, OperationLimits};
use idem::policy::{LoadedPolicy, PolicyRuntime, RuntimeConfig};
use idem_guest_build::Toolchains;
use idem_tests::{idem_bin, ports, tool_available};

const OP: &str = r#"{"kind":"charge","tenant":"acme","fields":{"invoice_id":"i1"}}"#;

fn toolchains() -> Toolchains {
    Toolchains::new(ports::toolchain_dir())
}

fn now_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis()
}

/// Builds the project in `dir` into `dir/<out>/`, loads it (no cache: each
/// build is new) and returns it.
fn build(dir: &Path, out: &str) -> (PathBuf, LoadedPolicy) {
    let (_, built) = idem_guest_build::build_project(
        dir,
        Some(&dir.join(out)),
        idem_guest_build::JsEngine::StarlingMonkey,
        &toolchains(),
    )
    .unwrap_or_else(|e| panic!("building {}: {e:#}", dir.display()));
    let runtime = PolicyRuntime::new(RuntimeConfig {
        cache_dir: None,
        ..RuntimeConfig::default()
    })
    .unwrap();
    let policy = runtime.load_file(&built.component).unwrap();
    (built.component, policy)
}

/// The key parts a policy derives for `op`, as `name=value`.
fn key_parts(policy: &LoadedPolicy, op: &str) -> Vec<String> {
    let op = Operation::from_json(op, &OperationLimits::default()).unwrap();
    let derivation = policy.derive_raw(&op, 0).unwrap().value.unwrap();
    derivation
        .key
        .iter()
        .map(|p| format!("{}={}", p.name, p.value))
        .collect()
}

/// A cases file pinning `policy`'s key for [`OP`].
fn pinned_cases(policy: &LoadedPolicy) -> String {
    let op = Operation::from_json(OP, &OperationLimits::default()).unwrap();
    let key = policy.derive(&op, 0).unwrap().value.unwrap().key.to_hex();
    format!(r#"{{"cases":[{{"name":"pinned","op":{OP},"expect":{{"key":"{key}"}}}}]}}"#)
}

/// `idem test` of `component` against `cases`: it must fail, naming the
/// key.
fn golden_vectors_catch(component: &Path, cases: &Path) {
    let out = Command::new(idem_bin())
        .arg("test")
        .arg("--policy")
        .arg(component)
        .arg("--no-cache")
        .arg(cases)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("0 passed, 1 failed"), "{stdout}");
    assert!(stdout.contains("key"), "{stdout}");
}

#[test]
fn javascript_time_and_chance_are_the_builds_and_golden_vectors_catch_them() {
    let test = "javascript_time_and_chance_are_the_builds";
    if !tool_available(test, "node") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    std::fs::write(
        dir.join("package.json"),
        r#"{"name": "stamped", "type": "module", "main": "policy.js"}"#,
    )
    .unwrap();
    // A policy that breaks the rule: time and chance in its key.
    std::fs::write(
        dir.join("policy.js"),
        r#"import { definePolicy, Derivation, Decision } from '@idem/policy';
export const policy = definePolicy({
  describe: () => ({ name: 'stamped', version: '1.0.0', namespace: 'stamped', description: 'keyed by the clock' }),
  derive: (op) => new Derivation('p')
    .key('invoice_id', op.text('invoice_id'))
    .key('date_now', String(Date.now()))
    .key('math_random', String(Math.random())),
  onDuplicate: (ctx) => Decision.standard(ctx),
});
"#,
    )
    .unwrap();
    let before = now_ms();
    let (_, first) = build(dir, "first");
    let after = now_ms();
    let parts = key_parts(&first, OP);
    // The same answer on every fresh instance…
    assert_eq!(key_parts(&first, OP), parts);
    // …with the clock stopped at the build.
    let date_now: u128 = parts[1].strip_prefix("date_now=").unwrap().parse().unwrap();
    assert!(
        (before..=after).contains(&date_now),
        "Date.now() = {date_now}, the build ran from {before} to {after}"
    );
    // A second build of the same source is built at another moment.
    std::thread::sleep(std::time::Duration::from_millis(5));
    let (second_wasm, second) = build(dir, "second");
    assert_ne!(key_parts(&second, OP)[1], parts[1]);
    let cases = dir.join("cases.json");
    std::fs::write(&cases, pinned_cases(&first)).unwrap();
    golden_vectors_catch(&second_wasm, &cases);
}

#[test]
fn python_time_traps_and_chance_is_the_builds() {
    let test = "python_time_traps_and_chance_is_the_builds";
    if !tool_available(test, "python3") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    std::fs::write(dir.join("pyproject.toml"), "[project]\nname = \"chance\"\n").unwrap();
    std::fs::write(
        dir.join("app.py"),
        r#"import random, time
from idem_policy import Decision, Derivation, Policy, PolicyInfo, export

class Chance(Policy):
    def describe(self):
        return PolicyInfo("chance", "1.0.0", "chance", "keyed by chance")

    def derive(self, op):
        if op.kind == "clock":
            return Derivation("p").key("time", str(time.time()))
        return (Derivation("p")
                .key("invoice_id", op.text("invoice_id"))
                .key("random", repr(random.random())))

    def on_duplicate(self, ctx):
        return Decision.standard(ctx)

Policy = export(Chance)
"#,
    )
    .unwrap();
    let (_, first) = build(dir, "first");
    let parts = key_parts(&first, OP);
    assert_eq!(
        key_parts(&first, OP),
        parts,
        "the same on every fresh instance"
    );
    // No clock: the evaluation traps, and fails alone.
    let clock = Operation::from_json(
        r#"{"kind":"clock","tenant":"acme","fields":{}}"#,
        &OperationLimits::default(),
    )
    .unwrap();
    let trapped = first.derive(&clock, 0);
    assert!(trapped.is_err(), "time.time() answered: {trapped:?}");
    assert_eq!(key_parts(&first, OP), parts, "the policy lives on");
    // Another build, another seed.
    let (second_wasm, second) = build(dir, "second");
    assert_ne!(key_parts(&second, OP), parts);
    let cases = dir.join("cases.json");
    std::fs::write(&cases, pinned_cases(&first)).unwrap();
    golden_vectors_catch(&second_wasm, &cases);
}
