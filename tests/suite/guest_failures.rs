//! What a policy's author sees when the policy fails: its own message,
//! always. A Rust panic; a thrown error, a typo, a call the sandbox cannot
//! serve (a clock, `print`, a lazy `import`), a syntax error and a missing
//! export in JavaScript (built with either engine, StarlingMonkey or
//! QuickJS) or Python: each comes out of `idem build`, `idem key` and `idem
//! test` naming the cause and the author's file and line (the lines are
//! found in the sources, not written down twice). A build the host would
//! refuse leaves no component behind.

use std::path::Path;
use std::process::{Command, Output};

use idem_tests::{idem_bin, policy_path, ports, tool_available};

/// `idem` in `dir`, with the toolchains the suite keeps.
fn idem(dir: &Path, args: &[&str]) -> Output {
    Command::new(idem_bin())
        .args(args)
        .current_dir(dir)
        .env("IDEM_CACHE_DIR", dir.join("cache"))
        .env("IDEM_TOOLCHAIN_DIR", ports::toolchain_dir())
        .env_remove("IDEM_SDK")
        .output()
        .unwrap()
}

/// `out`'s stderr and stdout, asserting it failed with `code`.
fn failed(out: &Output, code: i32) -> String {
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    assert_eq!(out.status.code(), Some(code), "{text}");
    text
}

/// The 1-based line of `source` holding `marker`.
fn line_of(source: &str, marker: &str) -> usize {
    source
        .lines()
        .position(|l| l.contains(marker))
        .unwrap_or_else(|| panic!("no `{marker}` in the source"))
        + 1
}

/// Writes a project: `files` as (name, text).
fn project(dir: &Path, files: &[(&str, &str)]) {
    std::fs::create_dir_all(dir).unwrap();
    for (name, text) in files {
        std::fs::write(dir.join(name), text).unwrap();
    }
}

/// Builds `dir` (the project), with `extra` flags, and returns the
/// component's path.
fn built(root: &Path, name: &str, extra: &[&str]) -> String {
    let out = idem(root, &[&["build", name], extra].concat());
    let stdout = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(
        out.status.success(),
        "idem build {name}: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// `idem key` and `idem run` of an operation of `kind`, failing as the
/// policy fails (exit 4), and `idem test` of a case with it: all three say
/// `expected`.
fn key_and_test_say(root: &Path, component: &str, kind: &str, expected: &[String]) {
    let op = root.join(format!("{kind}.json"));
    std::fs::write(
        &op,
        format!(r#"{{"kind":"{kind}","tenant":"t","fields":{{"id":"1"}}}}"#),
    )
    .unwrap();
    let said = failed(
        &idem(root, &["key", "--policy", component, op.to_str().unwrap()]),
        4,
    );
    let ran = failed(
        &idem(
            root,
            &[
                "run",
                "--policy",
                component,
                "--store",
                "memory:",
                "--ops",
                op.to_str().unwrap(),
                "--",
                "true",
            ],
        ),
        4,
    );
    let cases = root.join(format!("{kind}-cases.json"));
    std::fs::write(
        &cases,
        format!(
            r#"{{"cases":[{{"name":"{kind}","op":{{"kind":"{kind}","tenant":"t","fields":{{"id":"1"}}}},"expect":{{"partition":"t"}}}}]}}"#
        ),
    )
    .unwrap();
    let tested = failed(
        &idem(
            root,
            &["test", "--policy", component, cases.to_str().unwrap()],
        ),
        1,
    );
    for text in expected {
        assert!(
            said.contains(text.as_str()),
            "idem key: no `{text}` in:\n{said}"
        );
        assert!(
            ran.contains(text.as_str()),
            "idem run: no `{text}` in:\n{ran}"
        );
        assert!(
            tested.contains(text.as_str()),
            "idem test: no `{text}` in:\n{tested}"
        );
    }
}

/// The misbehaving fixture, built by the suite's build script: its `trap`
/// kind panics.
const MISBEHAVING: &str = include_str!("../fixtures/misbehaving/src/lib.rs");

#[test]
fn a_rust_policy_panics_in_its_own_words() {
    let root = tempfile::tempdir().unwrap();
    let root = root.path();
    let component = policy_path("fixture-misbehaving");
    let marker = "panic!(\"asked to trap\")";
    let line = line_of(MISBEHAVING, marker);
    let column = MISBEHAVING
        .lines()
        .nth(line - 1)
        .unwrap()
        .find(marker)
        .unwrap()
        + 1;
    // The place is the macro's, relative to the workspace the guest was
    // built in (as rustc was handed the file).
    key_and_test_say(
        root,
        component.to_str().unwrap(),
        "trap",
        &[format!(
            "uncaught in the policy: panic: asked to trap at tests/fixtures/misbehaving/src/lib.rs:{line}:{column}"
        )],
    );
}

const JS_POLICY: &str = r#"import { definePolicy, Derivation, Decision } from '@idem/policy';

function check(op) {
  if (op.kind === 'thrown') throw new RangeError('no refunds on Sundays'); // THROWN
  return op.txt('id'); // TYPO
}

export const policy = definePolicy({
  describe() {
    return { name: 'fails', version: '1.0.0', namespace: 'fails', description: 'fails on purpose' };
  },
  derive(op) {
    if (op.kind === 'forbidden') return new Derivation(process.env.HOME); // FORBIDDEN
    if (op.kind === 'clock') return new Derivation(String(Date.now())); // CLOCK
    check(op);
    return new Derivation('p').key('id', op.text('id'));
  },
  onDuplicate(ctx) {
    return Decision.standard(ctx);
  },
});
"#;

fn js_package(name: &str) -> String {
    format!(r#"{{"name":"{name}","type":"module","main":"policy.js"}}"#)
}

/// What each engine's own words are for a typo and a Node.js API, and
/// whether it reads a clock.
struct Engine {
    name: &'static str,
    typo: &'static str,
    forbidden: &'static str,
    /// What `Date.now()` says; StarlingMonkey answers it (with the moment
    /// of the build: `determinism.rs`).
    clock: Option<&'static str>,
}

const STARLINGMONKEY: Engine = Engine {
    name: "starlingmonkey",
    typo: "TypeError: op.txt is not a function",
    forbidden: "ReferenceError: process is not defined",
    clock: None,
};

const QUICKJS: Engine = Engine {
    name: "quickjs",
    typo: "TypeError: not a function",
    forbidden: "ReferenceError: process is not defined",
    clock: Some("Error: a policy has no clock: use op.nowMs"),
};

#[test]
fn a_javascript_policy_fails_in_its_own_words() {
    javascript_fails_in_its_own_words(
        "a_javascript_policy_fails_in_its_own_words",
        &STARLINGMONKEY,
    );
}

#[test]
fn a_quickjs_policy_fails_in_its_own_words() {
    javascript_fails_in_its_own_words("a_quickjs_policy_fails_in_its_own_words", &QUICKJS);
}

fn javascript_fails_in_its_own_words(test: &str, engine: &Engine) {
    if !tool_available(test, "node") {
        return;
    }
    let root = tempfile::tempdir().unwrap();
    let root = root.path();
    let build = |name: &str| idem(root, &["build", name, "--js-engine", engine.name]);

    // A syntax error: esbuild's file, line and column, whole, and nothing built.
    let broken = JS_POLICY.replace(
        "return op.txt('id'); // TYPO",
        "return op.txt('id') +; // TYPO",
    );
    project(
        &root.join("broken"),
        &[
            ("package.json", &js_package("broken")),
            ("policy.js", &broken),
        ],
    );
    let said = failed(&build("broken"), 2);
    let line = line_of(&broken, "// TYPO");
    assert!(said.contains(&format!("policy.js:{line}:")), "{said}");
    assert!(said.contains("Unexpected \";\""), "{said}");
    assert!(!said.contains("must export"), "{said}");
    assert!(!root.join("broken/dist").exists(), "{said}");

    // No `policy` export: said by name, nothing built.
    let unexported = JS_POLICY.replace("export const policy", "const policy");
    project(
        &root.join("unexported"),
        &[
            ("package.json", &js_package("unexported")),
            ("policy.js", &unexported),
        ],
    );
    let said = failed(&build("unexported"), 2);
    assert!(
        said.contains("does not export `policy` (it exports nothing)"),
        "{said}"
    );
    assert!(!root.join("unexported/dist").exists(), "{said}");

    // At run time: a thrown error, a typo, a Node.js API, a clock.
    project(
        &root.join("fails"),
        &[
            ("package.json", &js_package("fails")),
            ("policy.js", JS_POLICY),
        ],
    );
    let component = built(root, "fails", &["--js-engine", engine.name]);
    // The innermost frame in the author's file (SDK frames may come first).
    let at = |marker: &str, function: &str| {
        format!("{function} (policy.js:{})", line_of(JS_POLICY, marker))
    };
    key_and_test_say(
        root,
        &component,
        "thrown",
        &[
            "uncaught in the policy: RangeError: no refunds on Sundays".into(),
            at("// THROWN", "check"),
        ],
    );
    key_and_test_say(
        root,
        &component,
        "typo",
        &[engine.typo.into(), at("// TYPO", "check")],
    );
    key_and_test_say(
        root,
        &component,
        "forbidden",
        &[engine.forbidden.into(), at("// FORBIDDEN", "derive")],
    );
    if let Some(clock) = engine.clock {
        key_and_test_say(
            root,
            &component,
            "clock",
            &[
                format!("uncaught in the policy: {clock}"),
                at("// CLOCK", "derive"),
            ],
        );
    }
}

const PY_POLICY: &str = r#"import time

from idem_policy import Decision, Derivation, Policy, PolicyInfo, export


class Fails(Policy):
    def describe(self):
        return PolicyInfo("fails", "1.0.0", "fails", "fails on purpose")

    def derive(self, op):
        if op.kind == "thrown":
            raise ValueError("no refunds on Sundays")  # THROWN
        if op.kind == "clock":
            return Derivation(str(time.time()))  # CLOCK
        if op.kind == "print":
            print("deriving", op.kind)  # PRINT
        if op.kind == "lazy":
            import wave  # LAZY
        if op.kind == "typo":
            return Derivation(op.txt("id"))  # TYPO
        return Derivation("p").key("id", op.text("id"))

    def on_duplicate(self, ctx):
        return Decision.standard(ctx)


Policy = export(Fails)
"#;

const PY_PROJECT: &str = "[project]\nname = \"NAME\"\n";

#[test]
fn a_python_policy_fails_in_its_own_words() {
    if !tool_available("a_python_policy_fails_in_its_own_words", "python3") {
        return;
    }
    let root = tempfile::tempdir().unwrap();
    let root = root.path();

    // A syntax error: Python's file, line and message.
    let broken = PY_POLICY.replace("op.txt(\"id\"))  # TYPO", "op.txt(\"id\")  # TYPO");
    project(
        &root.join("broken"),
        &[
            ("pyproject.toml", &PY_PROJECT.replace("NAME", "broken")),
            ("app.py", &broken),
        ],
    );
    let said = failed(&idem(root, &["build", "broken"]), 2);
    assert!(said.contains("SyntaxError"), "{said}");
    let line = line_of(&broken, "# TYPO");
    let file = root.join("broken/app.py");
    assert!(
        said.contains(&format!("File \"{}\", line {line}", file.display())),
        "{said}"
    );
    assert!(!said.contains("must bind"), "{said}");
    assert!(!root.join("broken/dist").exists(), "{said}");

    // No `Policy` export: said by name, nothing left in dist/.
    let unexported = PY_POLICY.replace("Policy = export(Fails)", "");
    project(
        &root.join("unexported"),
        &[
            ("pyproject.toml", &PY_PROJECT.replace("NAME", "unexported")),
            ("app.py", &unexported),
        ],
    );
    let said = failed(&idem(root, &["build", "unexported"]), 2);
    assert!(said.contains("Policy"), "{said}");
    assert!(
        !root.join("unexported/dist/unexported.wasm").exists(),
        "{said}"
    );

    // At run time: a raised error, a typo, and what the sandbox cannot serve.
    project(
        &root.join("fails"),
        &[
            ("pyproject.toml", &PY_PROJECT.replace("NAME", "fails")),
            ("app.py", PY_POLICY),
        ],
    );
    let component = built(root, "fails", &[]);
    // The innermost frame in the author's file (SDK frames may come first).
    let at = |marker: &str| format!("derive (app.py:{})", line_of(PY_POLICY, marker));
    for (kind, cause, marker) in [
        ("thrown", "ValueError: no refunds on Sundays", "# THROWN"),
        (
            "typo",
            "AttributeError: 'Operation' object has no attribute 'txt'",
            "# TYPO",
        ),
        (
            "clock",
            "SandboxError: time.time() is not available in a policy",
            "# CLOCK",
        ),
        (
            "print",
            "SandboxError: print() and sys.stdout are not available",
            "# PRINT",
        ),
        (
            "lazy",
            "ImportError: `import wave` while the policy runs",
            "# LAZY",
        ),
    ] {
        key_and_test_say(
            root,
            &component,
            kind,
            &[format!("uncaught in the policy: {cause}"), at(marker)],
        );
    }
}
