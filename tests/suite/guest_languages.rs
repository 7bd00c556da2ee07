//! Policies in JavaScript and Python, natively: each SDK's own tests, and
//! each ported example policy run against the Rust policy's cases file by
//! its language's cases runner (`guest/js/sdk/cases.js`,
//! `idem_policy.cases`), so all three languages answer one file. Node.js
//! and CPython are on every machine of this kind; elsewhere a missing one
//! is said and skipped, and under CI it is a failure.

use std::path::PathBuf;
use std::process::Command;

use idem_tests::workspace_root;

const POLICIES: [&str; 3] = ["billing-charge", "provider-charge", "http-idempotency-key"];

/// Whether `program` runs; under CI its absence fails the test.
fn available(test: &str, program: &str) -> bool {
    let found = Command::new(program)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
        assert!(!ci, "{test}: `{program}` is not installed, and CI=true");
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED {test}: `{program}` is not installed"
        );
    }
    found
}

/// Runs `command`, failing the test with its output unless it succeeds;
/// returns its stdout.
fn passes(command: &mut Command) -> String {
    let out = command.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{command:?} failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// How many cases the Rust policy's file holds.
fn cases_in(policy: &str) -> usize {
    let path = rust_cases(policy);
    let file: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    file["cases"].as_array().unwrap().len()
}

/// A runner's closing line says every case of the Rust file passed.
fn all_passed(stdout: &str, policy: &str) {
    let expected = format!("{} passed, 0 failed", cases_in(policy));
    assert!(
        stdout.lines().last() == Some(expected.as_str()),
        "{policy}: expected `{expected}`:\n{stdout}"
    );
}

#[test]
fn the_javascript_sdk_and_ports_pass_the_rust_policies_cases() {
    if !available("the_javascript_sdk_and_ports", "node") {
        return;
    }
    let js = workspace_root().join("guest/js");
    passes(
        Command::new("node")
            .args(["--test", "tests/"])
            .current_dir(&js),
    );
    for policy in POLICIES {
        let stdout = passes(
            Command::new("node")
                .arg(js.join("sdk/cases.js"))
                .arg(js.join("policies").join(policy).join("policy.js"))
                .arg(rust_cases(policy)),
        );
        all_passed(&stdout, policy);
    }
}

#[test]
fn the_python_sdk_and_ports_pass_the_rust_policies_cases() {
    if !available("the_python_sdk_and_ports", "python3") {
        return;
    }
    let python = workspace_root().join("guest/python");
    // No bytecode left in the checkout.
    passes(
        Command::new("python3")
            .args(["-m", "unittest", "discover", "-s", "tests"])
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .current_dir(&python),
    );
    for policy in POLICIES {
        let stdout = passes(
            Command::new("python3")
                .args(["-m", "idem_policy.cases"])
                .arg(python.join("policies").join(policy))
                .arg(rust_cases(policy))
                .env("PYTHONDONTWRITEBYTECODE", "1")
                .current_dir(python.join("sdk")),
        );
        all_passed(&stdout, policy);
    }
}

/// The Rust policy's cases file, which every port answers.
fn rust_cases(policy: &str) -> PathBuf {
    let path = workspace_root()
        .join("guest/policies")
        .join(policy)
        .join("cases.json");
    assert!(path.is_file(), "{}", path.display());
    path
}
