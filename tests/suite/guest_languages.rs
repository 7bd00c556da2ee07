//! Policies in JavaScript and Python: each SDK's own tests; each ported
//! example policy run against the Rust policy's cases file by its
//! language's cases runner (`guest/js/sdk/cases.js`, `idem_policy.cases`),
//! so all three languages answer one file; and `idem new --lang` for each
//! template, then the language's own test command (`npm test`, `pytest`),
//! which runs the cases natively and through the component it builds, as a
//! new user runs them.
//! Node.js and CPython are on every machine of this kind; elsewhere a
//! missing one is said and skipped, and under CI it is a failure.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;

use idem_tests::{idem_bin, ports, tool_available, workspace_root};

const POLICIES: [&str; 3] = ["billing-charge", "provider-charge", "http-idempotency-key"];

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
    if !tool_available("the_javascript_sdk_and_ports", "node") {
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
    if !tool_available("the_python_sdk_and_ports", "python3") {
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

fn idem(dir: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(idem_bin());
    cmd.args(args)
        .current_dir(dir)
        .env("IDEM_CACHE_DIR", dir.join("cache"))
        // Kept between runs of the suite (and CI runs on one machine), so
        // only the first run downloads the toolchains.
        .env("IDEM_TOOLCHAIN_DIR", ports::toolchain_dir())
        .env_remove("IDEM_SDK");
    cmd
}

/// How many cases a cases file holds.
fn cases_in_file(path: &Path) -> usize {
    let file: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    file["cases"].as_array().unwrap().len()
}

/// From nothing to a tested component, as a new user outside the
/// workspace does it, in `lang`: `idem new` for each template, then the
/// language's own test command (`ecosystem` runs it in the project's
/// directory with `IDEM` naming the CLI): the cases natively, then through
/// the component it builds (`idem build`, which installs the language's
/// toolchain on first use and loads the component in the host) and `idem
/// test`. The component it built then passes `idem test` run here too.
fn new_build_test(lang: &str, ecosystem: impl Fn(&dyn Fn(&OsStr) -> Command)) {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    for (name, kind) in [("refunds", "charge"), ("api-writes", "http")] {
        let made = passes(&mut idem(
            dir,
            &["new", name, "--lang", lang, "--kind", kind],
        ));
        assert!(made.contains(&format!("idem build {name}")), "{made}");
        let project = dir.join(name);
        let cases = project.join("cases.json");
        let all_pass = format!("{} passed, 0 failed", cases_in_file(&cases));

        ecosystem(&|program| in_project(program, dir, &project));

        let component = project.join("dist").join(format!("{name}.wasm"));
        assert!(component.is_file(), "{} was not built", component.display());
        let tested = passes(&mut idem(
            dir,
            &[
                "test",
                "--policy",
                component.to_str().unwrap(),
                cases.to_str().unwrap(),
            ],
        ));
        assert!(tested.contains(&all_pass), "{tested}");
        assert!(!tested.contains("FAIL"), "{tested}");
    }
}

/// `program` run in `project` as its author runs it, with `IDEM` naming
/// this build's CLI and the suite's caches for what it runs.
fn in_project(program: &OsStr, dir: &Path, project: &Path) -> Command {
    let mut cmd = Command::new(program);
    cmd.current_dir(project)
        .env("IDEM", idem_bin())
        .env("IDEM_CACHE_DIR", dir.join("cache"))
        .env("IDEM_TOOLCHAIN_DIR", ports::toolchain_dir())
        .env_remove("IDEM_SDK")
        .env_remove("IDEM_JS_ENGINE");
    cmd
}

#[test]
fn a_javascript_policy_from_idem_new_to_idem_test() {
    javascript_from_idem_new(
        "a_javascript_policy_from_idem_new_to_idem_test",
        "starlingmonkey",
    );
}

/// The same with the QuickJS engine, chosen as an author would for `npm
/// test`'s build: `IDEM_JS_ENGINE=quickjs`.
#[test]
fn a_quickjs_policy_from_idem_new_to_idem_test() {
    javascript_from_idem_new("a_quickjs_policy_from_idem_new_to_idem_test", "quickjs");
}

fn javascript_from_idem_new(test: &str, engine: &str) {
    if !tool_available(test, "node") {
        return;
    }
    new_build_test("js", |run| {
        // `npm install` links the SDK (a file: dependency): no registry.
        passes(run("npm".as_ref()).args(["install", "--no-audit", "--no-fund", "--offline"]));
        // `npm test` is `node --test`: two tests, neither skipped.
        let report = passes(
            run("npm".as_ref())
                .args(["test", "--silent"])
                .env("IDEM_JS_ENGINE", engine),
        );
        for line in ["# pass 2", "# fail 0", "# skipped 0"] {
            assert!(report.lines().any(|l| l == line), "no `{line}`:\n{report}");
        }
        // Built with the engine asked for: a QuickJS component is a
        // seventh of a StarlingMonkey one's 12 MB.
        let sizes = passes(run("sh".as_ref()).args(["-c", "cat dist/*.wasm | wc -c"]));
        let bytes: u64 = sizes.trim().parse().unwrap();
        let quickjs = bytes < 4_000_000;
        assert_eq!(quickjs, engine == "quickjs", "{engine}: {bytes} bytes");
    });
}

#[test]
fn a_python_policy_from_idem_new_to_idem_test() {
    if !tool_available("a_python_policy_from_idem_new_to_idem_test", "python3") {
        return;
    }
    // pytest as the SDK's own tests pin it, installed once.
    let venv = crate::guest_types::python_tools(&crate::guest_types::python_pins(
        &workspace_root().join("guest/python"),
    ));
    new_build_test("python", |run| {
        // `pytest` finds the SDK from pyproject.toml: no PYTHONPATH.
        let report = passes(
            run(venv.join("bin/python").as_os_str())
                .args(["-m", "pytest", "-rs"])
                .env_remove("PYTHONPATH")
                .env("PYTHONDONTWRITEBYTECODE", "1"),
        );
        let last = report.lines().last().unwrap_or_default();
        assert!(
            last.contains("2 passed") && !last.contains("skipped") && !last.contains("failed"),
            "{report}"
        );
    });
}
