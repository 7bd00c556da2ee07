//! The guest SDKs' types, checked as their authors' tools check them: the
//! JavaScript SDK's declarations (`guest/js/sdk/index.d.ts`) by `npm run
//! typecheck` (tsc over a strict TypeScript refund policy and a file of
//! wrong uses, the declared names against the exported ones, the compiled
//! policy against `guest/testdata/refund-cases.json`); the Python SDK by
//! `mypy` (strict, over the SDK and `guest/python/tests/typed/`) and its
//! tests by `pytest`, both configured in `guest/python/pyproject.toml`.
//!
//! The tools are the releases the SDKs pin (`package.json`'s
//! devDependencies with its lock file; `pyproject.toml`'s `dev` group),
//! installed on first use under the target directory and kept there, as
//! `clients/mod.rs` does for pytest: never into the work tree, where `npm
//! ci` would also wipe an author's own `node_modules`. Without Node.js or
//! CPython the test says it skipped; under `CI=true` that is a failure.
//!
//! And `pip install` of the Python SDK, plain and editable, as an author
//! runs it from a checkout: into a virtual environment, leaving the
//! checkout's SDK folder as it was.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use idem_tests::{passes, tool_available, workspace_root};

/// A directory under the target directory, made once: `install` fills it,
/// then a marker says it is whole (an interrupted install is redone).
pub(crate) fn installed_once(name: &str, install: impl FnOnce(&Path)) -> PathBuf {
    /// Two tests of this binary may want one directory at once.
    static MADE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    let made = dir.join("idem-installed");
    let _one = MADE.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if !made.is_file() {
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        install(&dir);
        std::fs::write(&made, "").unwrap();
    }
    dir
}

/// The TypeScript release the JavaScript SDK pins.
fn typescript_pin(sdk: &Path) -> String {
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(sdk.join("package.json")).unwrap()).unwrap();
    let pin = manifest["devDependencies"]["typescript"]
        .as_str()
        .expect("package.json pins typescript");
    assert!(
        pin.chars().all(|c| c.is_ascii_digit() || c == '.'),
        "typescript is pinned exactly, not `{pin}`"
    );
    pin.to_string()
}

#[test]
fn the_javascript_sdk_declarations_hold_against_its_javascript() {
    let test = "the_javascript_sdk_declarations_hold_against_its_javascript";
    if !tool_available(test, "node") || !tool_available(test, "npm") {
        return;
    }
    let sdk = workspace_root().join("guest/js/sdk");
    let started = Instant::now();
    // The SDK's own manifest and lock file, installed elsewhere: `npm ci`
    // checks the lock's integrity hashes.
    let tools = installed_once(
        &format!("js-sdk-typescript-{}", typescript_pin(&sdk)),
        |dir| {
            for file in ["package.json", "package-lock.json"] {
                std::fs::copy(sdk.join(file), dir.join(file)).unwrap();
            }
            passes(
                "npm ci for the JavaScript SDK's TypeScript (the npm registry must be reachable)",
                Command::new("npm")
                    .args(["ci", "--no-audit", "--no-fund", "--ignore-scripts"])
                    .current_dir(dir),
            );
        },
    );
    let installed = started.elapsed();
    let modules = tools.join("node_modules");
    // `npm run typecheck` as written in package.json, with the tools found
    // on PATH (tsc) and NODE_PATH (run.mjs requires `typescript`).
    let path = std::env::join_paths(std::iter::once(modules.join(".bin")).chain(
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()),
    ))
    .unwrap();
    let report = passes(
        "npm run typecheck in guest/js/sdk",
        Command::new("npm")
            .args(["run", "--silent", "typecheck"])
            .env("PATH", path)
            .env("NODE_PATH", &modules)
            .current_dir(&sdk),
    );
    assert!(report.contains("index.d.ts: "), "{report}");
    assert!(
        report
            .lines()
            .last()
            .is_some_and(|l| l.ends_with(" passed, 0 failed")),
        "{report}"
    );
    eprintln!(
        "{test}: TypeScript ready in {:.1} s, the check took {:.1} s",
        installed.as_secs_f64(),
        (started.elapsed() - installed).as_secs_f64()
    );
}

/// The `dev` dependency group of `guest/python/pyproject.toml`: the exact
/// pytest and mypy the Python SDK is checked with.
pub(crate) fn python_pins(python: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(python.join("pyproject.toml")).unwrap();
    let project: toml::Table = toml::from_str(&text).unwrap();
    let pins: Vec<String> = project["dependency-groups"]["dev"]
        .as_array()
        .expect("a dev dependency group")
        .iter()
        .map(|p| p.as_str().unwrap().to_string())
        .collect();
    for tool in ["pytest==", "mypy=="] {
        assert!(
            pins.iter().any(|p| p.starts_with(tool)),
            "{tool} is pinned: {pins:?}"
        );
    }
    pins
}

/// A virtual environment holding `pins` (pytest and mypy), made once.
pub(crate) fn python_tools(pins: &[String]) -> PathBuf {
    installed_once(
        &format!("guest-python-{}", pins.join("-").replace("==", "-")),
        |dir| {
            passes(
                "python3 -m venv",
                Command::new("python3").args(["-m", "venv"]).arg(dir),
            );
            passes(
                &format!("pip install {} (PyPI must be reachable)", pins.join(" ")),
                Command::new(dir.join("bin/python"))
                    .args([
                        "-m",
                        "pip",
                        "install",
                        "--quiet",
                        "--disable-pip-version-check",
                    ])
                    .args(pins),
            );
        },
    )
}

#[test]
fn the_python_sdk_passes_mypy_strict_and_its_tests_under_pytest() {
    let test = "the_python_sdk_passes_mypy_strict_and_its_tests_under_pytest";
    if !tool_available(test, "python3") {
        return;
    }
    let python = workspace_root().join("guest/python");
    let pins = python_pins(&python);
    let started = Instant::now();
    let venv = python_tools(&pins);
    let installed = started.elapsed();
    let interpreter = venv.join("bin/python");

    // pytest finds the tests and the SDK from pyproject.toml alone: no
    // PYTHONPATH here, as none is needed by an author.
    let report = passes(
        "pytest in guest/python",
        Command::new(&interpreter)
            .args(["-m", "pytest", "-q"])
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .env_remove("PYTHONPATH")
            .current_dir(&python),
    );
    let last = report.lines().last().unwrap_or_default();
    assert!(
        last.contains(" passed") && !last.contains("failed"),
        "{report}"
    );
    let tested = started.elapsed();

    let checked = passes(
        "mypy (strict) in guest/python",
        Command::new(&interpreter)
            .args(["-m", "mypy", "--cache-dir"])
            .arg(venv.join("mypy-cache"))
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .current_dir(&python),
    );
    assert!(checked.starts_with("Success: no issues found"), "{checked}");
    eprintln!(
        "{test}: tools ready in {:.1} s, pytest {:.1} s, mypy {:.1} s",
        installed.as_secs_f64(),
        (tested - installed).as_secs_f64(),
        (started.elapsed() - tested).as_secs_f64()
    );
}

/// Every file under `dir` but Python's byte-code caches (another test's
/// interpreter may write those at any time), with its length.
fn files_under(dir: &Path) -> Vec<(PathBuf, u64)> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).unwrap().flatten() {
            let path = entry.path();
            if entry.file_name() == "__pycache__" {
                continue;
            }
            if path.is_dir() {
                todo.push(path);
            } else {
                let len = entry.metadata().unwrap().len();
                out.push((path.strip_prefix(dir).unwrap().to_path_buf(), len));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn installing_the_python_sdk_leaves_the_checkout_as_it_was() {
    let test = "installing_the_python_sdk_leaves_the_checkout_as_it_was";
    if !tool_available(test, "python3") {
        return;
    }
    let sdk = workspace_root().join("guest/python/sdk");
    let before = files_under(&sdk);
    let venv = tempfile::tempdir().unwrap();
    passes(
        "python3 -m venv",
        Command::new("python3")
            .args(["-m", "venv"])
            .arg(venv.path()),
    );
    let python = venv.path().join("bin/python");
    for editable in [false, true] {
        let mut pip = Command::new(&python);
        pip.args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
        ]);
        if editable {
            pip.arg("--editable");
        }
        passes(
            &format!("pip install (editable: {editable}) of the SDK (PyPI must be reachable)"),
            pip.arg(&sdk).env("PYTHONDONTWRITEBYTECODE", "1"),
        );
        // Installed whole: the package, its subpackage and its annotations.
        let found = passes(
            "import idem_policy from the virtual environment",
            Command::new(&python)
                .args([
                    "-c",
                    "import idem_policy, idem_policy._host, importlib.resources as r; \
                     print(r.files('idem_policy').joinpath('py.typed').is_file())",
                ])
                .env("PYTHONDONTWRITEBYTECODE", "1")
                .env_remove("PYTHONPATH")
                .current_dir(venv.path()),
        );
        assert_eq!(found.trim(), "True", "editable: {editable}");
        assert_eq!(
            files_under(&sdk),
            before,
            "pip install (editable: {editable}) wrote into {}",
            sdk.display()
        );
    }
}
