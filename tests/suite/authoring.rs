//! Writing a policy as a new user does, from a directory outside the
//! workspace: `idem new`, `idem build`, `idem test`, and `cargo test` of the
//! generated crate.

use std::path::Path;
use std::process::{Command, Output};

use idem_tests::{idem_bin, succeed};

/// The generated crates' cargo target directory: kept between runs of the
/// suite, so only the first run compiles the SDK's dependencies.
fn cargo_target() -> std::path::PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("authoring-target")
}

fn idem(dir: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(idem_bin());
    cmd.args(args)
        .current_dir(dir)
        .env("CARGO_TARGET_DIR", cargo_target())
        .env("IDEM_CACHE_DIR", dir.join("cache"))
        .env_remove("IDEM_SDK");
    cmd
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn fails_with(out: Output, code: i32, needle: &str) {
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "{stderr}");
    assert!(stderr.contains(needle), "expected `{needle}` in: {stderr}");
}

/// From nothing to a tested component in three commands, for every
/// template, and the same cases pass natively under `cargo test`.
#[test]
fn new_build_test_from_outside_the_workspace() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    assert!(
        !dir.starts_with(idem_tests::workspace_root()),
        "the point is a directory outside the workspace"
    );
    for (name, kind) in [("refunds", "charge"), ("api-writes", "http")] {
        let made = succeed(&mut idem(dir, &["new", name, "--kind", kind]));
        assert!(text(&made.stdout).contains(&format!("idem build {name}")));
        let manifest = std::fs::read_to_string(dir.join(name).join("Cargo.toml")).unwrap();
        assert!(
            manifest.contains(&format!("name = \"{name}\"")),
            "{manifest}"
        );
        // By version, and by path into the tree this idem was built from.
        let sdk = idem_tests::workspace_root().join("guest/sdk");
        let sdk = sdk.canonicalize().unwrap();
        assert!(
            manifest.contains(&format!(
                "idem-policy = {{ version = \"{}\", path = \"{}\" }}",
                env!("CARGO_PKG_VERSION"),
                sdk.display()
            )),
            "{manifest}"
        );

        let built = succeed(&mut idem(dir, &["build", name, "--out", "out"]));
        let component = dir.join(text(&built.stdout).trim());
        assert_eq!(component, dir.join("out").join(format!("{name}.wasm")));
        assert!(
            !dir.join("out").join(format!("{name}.core.wasm")).exists(),
            "only the component is written"
        );

        let cases = format!("{name}/cases.json");
        let policy = component.to_str().unwrap();
        let tested = succeed(&mut idem(dir, &["test", "--policy", policy, &cases]));
        let report = text(&tested.stdout);
        assert!(report.contains(" passed, 0 failed"), "{report}");
        assert!(!report.contains("FAIL"), "{report}");

        let native = succeed(
            Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
                .args(["test", "--quiet", "--manifest-path"])
                .arg(dir.join(name).join("Cargo.toml"))
                .arg("--")
                .arg("--nocapture")
                .env("CARGO_TARGET_DIR", cargo_target())
                .env("IDEM_BIN", idem_bin())
                .env("IDEM_CACHE_DIR", dir.join("cache"))
                .env_remove("IDEM_SDK"),
        );
        // Natively and against the built component, in the host.
        let out = text(&native.stdout);
        assert!(out.contains("test result: ok. 2 passed"), "{out}");
        assert!(!out.contains("SKIPPED"), "{out}");
        assert!(out.contains(" passed, 0 failed"), "{out}");
    }
    // Without --out, the component lands in the crate's target directory,
    // and the path printed is where it is.
    let built = succeed(&mut idem(&dir.join("refunds"), &["build"]));
    let printed = text(&built.stdout);
    let component = Path::new(printed.trim());
    assert!(component.is_file(), "{printed}");
    assert!(
        component.starts_with(cargo_target().join("policies")),
        "{printed}"
    );
}

/// `--registry`: the SDK by version alone, as crates.io will serve it; the
/// manifest is otherwise the same crate (not built here: nothing is
/// published from this machine).
#[test]
fn new_can_depend_on_the_sdk_by_version_alone() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let made = succeed(&mut idem(dir, &["new", "refunds", "--registry"]));
    let version = env!("CARGO_PKG_VERSION");
    assert!(
        text(&made.stdout).contains(&format!("SDK: idem-policy {version} from crates.io")),
        "{}",
        text(&made.stdout)
    );
    let manifest = std::fs::read_to_string(dir.join("refunds/Cargo.toml")).unwrap();
    assert!(
        manifest.contains(&format!("\nidem-policy = \"{version}\"\n")),
        "{manifest}"
    );
    assert!(!manifest.contains("path ="), "{manifest}");
    let parsed: toml::Table = manifest.parse().expect("the manifest is TOML");
    assert_eq!(
        parsed["dependencies"]["idem-policy"].as_str(),
        Some(version)
    );
    fails_with(
        idem(dir, &["new", "p", "--lang", "js", "--registry"])
            .output()
            .unwrap(),
        2,
        "--registry is for Rust policies",
    );
}

#[test]
fn new_and_build_refuse_what_they_cannot_use() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    fails_with(
        idem(dir, &["new", "My_Policy"]).output().unwrap(),
        2,
        "`My_Policy` is not a policy name",
    );
    std::fs::create_dir(dir.join("taken")).unwrap();
    fails_with(
        idem(dir, &["new", "taken"]).output().unwrap(),
        2,
        "taken already exists",
    );
    fails_with(
        idem(dir, &["new", "p", "--sdk", "/nonexistent"])
            .output()
            .unwrap(),
        2,
        "/nonexistent (from --sdk) is not the Rust SDK",
    );
    fails_with(
        idem(dir, &["new", "p", "--lang", "js", "--sdk", "/nonexistent"])
            .output()
            .unwrap(),
        2,
        "/nonexistent (from --sdk) is not the JavaScript SDK",
    );
    fails_with(
        idem(dir, &["new", "p", "--lang", "cobol"])
            .output()
            .unwrap(),
        2,
        "invalid value 'cobol'",
    );
    fails_with(
        idem(dir, &["new", "p", "--kind", "lottery"])
            .output()
            .unwrap(),
        2,
        "invalid value 'lottery'",
    );
    assert!(
        !dir.join("p").exists(),
        "a refused `idem new` writes nothing"
    );

    fails_with(
        idem(dir, &["build", "nowhere"]).output().unwrap(),
        2,
        "nowhere does not exist",
    );
    fails_with(
        idem(dir, &["build", "taken"]).output().unwrap(),
        2,
        "taken has no Cargo.toml",
    );
    let plain = dir.join("plain");
    std::fs::create_dir_all(plain.join("src")).unwrap();
    std::fs::write(
        plain.join("Cargo.toml"),
        "[package]\nname = \"plain\"\nversion = \"0.1.0\"\nedition = \"2024\"\n[workspace]\n",
    )
    .unwrap();
    std::fs::write(plain.join("src/lib.rs"), "").unwrap();
    fails_with(
        idem(dir, &["build", "plain"]).output().unwrap(),
        2,
        "package `plain`",
    );
    // Two languages' manifests in one directory: which one is meant?
    std::fs::write(plain.join("package.json"), r#"{"name": "plain"}"#).unwrap();
    fails_with(
        idem(dir, &["build", "plain"]).output().unwrap(),
        2,
        "holds Cargo.toml and package.json: name the manifest of the one to build",
    );
    // A JavaScript package whose policy module (by default policy.js) is
    // not there.
    fails_with(
        idem(dir, &["build", "plain/package.json"])
            .output()
            .unwrap(),
        2,
        "policy.js as the policy module",
    );
    let js = dir.join("js");
    std::fs::create_dir(&js).unwrap();
    std::fs::write(
        js.join("package.json"),
        r#"{"name": "js", "main": "gone.js"}"#,
    )
    .unwrap();
    fails_with(
        idem(dir, &["build", "js"]).output().unwrap(),
        2,
        "as the policy module (\"main\"), which does not exist",
    );
    let py = dir.join("py");
    std::fs::create_dir(&py).unwrap();
    std::fs::write(py.join("pyproject.toml"), "[project]\nname = \"py\"\n").unwrap();
    fails_with(
        idem(dir, &["build", "py"]).output().unwrap(),
        2,
        "has no app.py",
    );
}
