//! The native runners pinned to the host. Each SDK re-implements the host
//! for its native tests (canonicalising an operation, reading its numbers,
//! hashing parts into keys, the policy error's lowering): `npm test` and
//! `pytest` answer in well under a second without building a component.
//! Here they are held to the host: for generated operations (every field
//! type, numbers in every spelling with exponents, unicode, missing
//! fields; [`crate::ports::operation`]) the host runs the built component
//! of each ported policy, and its answers become a cases file: each case an
//! operation and what the host derived (key, fingerprint, partition,
//! retention and lease) or the refusal it gave (code and field). The
//! JavaScript runner (`guest/js/sdk/cases.js`) and the Python one
//! (`python -m idem_policy.cases`) must pass every case of it with the
//! policy's source, and `idem test` with the component, so a native runner
//! that drifts from the host fails here, naming the operation.
//!
//! The refusal's message is not compared (a cases file says code and
//! field); the ports test compares it across languages in the host.

use std::path::{Path, PathBuf};
use std::process::Command;

use idem::core::{Operation, OperationLimits};
use idem_guest_build::Toolchains;
use idem_tests::{idem_bin, ports, tool_available, workspace_root};
use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::TestRunner;

use crate::ports::{POLICIES, json_text, operation, runtime};

/// Operations per policy and runner.
const OPERATIONS: usize = 1_000;

/// A cases file of `OPERATIONS` generated operations, each expecting what
/// the host gives with the component `port` built of `policy`.
fn host_cases(port: &str, policy: &str) -> String {
    let loaded = runtime()
        .load_file(&ports::component(port, policy))
        .unwrap_or_else(|e| panic!("loading the {port} {policy}: {e}"));
    let mut runner = TestRunner::default();
    let strategy = operation();
    let mut cases = Vec::new();
    let (mut derived, mut refused) = (0, 0);
    while cases.len() < OPERATIONS {
        let doc = strategy.new_tree(&mut runner).unwrap().current();
        // What the host refuses before any policy sees it is no case.
        let Ok(op) = Operation::from_json(&doc, &OperationLimits::default()) else {
            continue;
        };
        let evaluated = loaded
            .derive(&op, 0)
            .unwrap_or_else(|e| panic!("the {port} {policy} failed on {doc}: {e}"));
        let expect = match evaluated.value {
            Ok(d) => {
                derived += 1;
                format!(
                    r#"{{"key":"{}","fingerprint":"{}","partition":{},"retention_s":{},"lease_s":{}}}"#,
                    d.key.to_hex(),
                    d.fingerprint.to_hex(),
                    json_text(d.partition.clone()),
                    d.retention_s,
                    d.lease_s
                )
            }
            Err(e) => {
                refused += 1;
                let field = e
                    .field
                    .as_ref()
                    .map(|f| format!(r#","field":{}"#, json_text(f.clone())))
                    .unwrap_or_default();
                format!(r#"{{"error":"{}"{field}}}"#, e.code.as_str())
            }
        };
        // The operation as generated, byte for byte: its numbers' spellings
        // are what the runners must read as the host does.
        cases.push(format!(
            r#"{{"name":"operation {}","op":{doc},"expect":{expect}}}"#,
            cases.len() + 1
        ));
    }
    assert!(
        derived >= 20 && refused >= 20,
        "{policy}: {derived} derived, {refused} refused: the operations test too little"
    );
    format!(
        "{{\"policy\":{},\"cases\":[\n{}\n]}}\n",
        json_text(policy.to_string()),
        cases.join(",\n")
    )
}

/// Runs `command`; its stdout must end with every case passed.
fn all_pass(what: &str, command: &mut Command, file: &Path) {
    let out = command.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let all = format!("{OPERATIONS} passed, 0 failed");
    if out.status.success() && stdout.lines().last() == Some(all.as_str()) {
        return;
    }
    let failures: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("FAIL"))
        .take(10)
        .collect();
    panic!(
        "{what} disagrees with the host on {} (kept there): {}\n{}\n{}",
        file.display(),
        stdout.lines().last().unwrap_or(""),
        failures.join("\n"),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Where a generated cases file is kept: the target directory's, so a
/// failure can be replayed.
fn kept_file(runner: &str, policy: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("native-runners");
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(format!("{runner}-{policy}.json"))
}

/// The cases file `file` passes in the host too, with the component.
fn host_passes(component: &Path, file: &Path) {
    all_pass(
        "idem test",
        Command::new(idem_bin())
            .arg("test")
            .arg("--policy")
            .arg(component)
            .arg("--cache-dir")
            .arg(ports::cache_dir())
            .arg(file),
        file,
    );
}

/// The JavaScript module the native runner loads for `policy`: the port's
/// `main`, or, for the refund policy written in TypeScript (which Node.js
/// 20 does not run), that source bundled by the build's esbuild.
fn javascript_module(policy: &str) -> PathBuf {
    let js = workspace_root().join("guest/js");
    let project = js.join("policies").join(policy);
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(project.join("package.json")).unwrap()).unwrap();
    let main = project.join(manifest["main"].as_str().unwrap_or("policy.js"));
    if main.extension().is_some_and(|e| e == "js") {
        return main;
    }
    let tools = Toolchains::new(ports::toolchain_dir())
        .javascript()
        .expect("the JavaScript toolchain installs");
    let out = kept_file("js", policy).with_extension("mjs");
    let status = Command::new(&tools.esbuild)
        .arg(&main)
        .args([
            "--bundle",
            "--format=esm",
            "--platform=node",
            "--log-level=warning",
        ])
        .arg(format!("--alias:@idem/policy={}", js.join("sdk").display()))
        .arg(format!("--outfile={}", out.display()))
        .status()
        .unwrap();
    assert!(status.success(), "esbuild {}", main.display());
    out
}

#[test]
fn the_javascript_runner_answers_as_the_host() {
    if !tool_available("the_javascript_runner_answers_as_the_host", "node") {
        return;
    }
    let cases_js = workspace_root().join("guest/js/sdk/cases.js");
    for policy in POLICIES {
        let file = kept_file("js", policy);
        std::fs::write(&file, host_cases("js-quickjs", policy)).unwrap();
        host_passes(&ports::component("js-quickjs", policy), &file);
        all_pass(
            &format!("the JavaScript runner with the {policy} policy"),
            Command::new("node")
                .arg(&cases_js)
                .arg(javascript_module(policy))
                .arg(&file),
            &file,
        );
    }
}

#[test]
fn the_python_runner_answers_as_the_host() {
    if !tool_available("the_python_runner_answers_as_the_host", "python3") {
        return;
    }
    let python = workspace_root().join("guest/python");
    for policy in POLICIES {
        let file = kept_file("python", policy);
        std::fs::write(&file, host_cases("python", policy)).unwrap();
        host_passes(&ports::component("python", policy), &file);
        all_pass(
            &format!("the Python runner with the {policy} policy"),
            Command::new("python3")
                .args(["-m", "idem_policy.cases"])
                .arg(python.join("policies").join(policy))
                .arg(&file)
                .env("PYTHONDONTWRITEBYTECODE", "1")
                .current_dir(python.join("sdk")),
            &file,
        );
    }
}
