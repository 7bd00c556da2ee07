//! The JavaScript and Python ports of the example policies
//! (`guest/js/policies`, `guest/python/policies`), built as `idem build`
//! builds them, for the suites and the benches.
//!
//! A build is not reproducible (a JavaScript snapshot holds the moment it
//! was taken, a Python build its hash seeds), so each port is kept in the
//! target directory per state of its sources: a run with nothing changed
//! builds nothing, and its compiled artifact stays in [`cache_dir`].

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use idem_guest_build::{JsEngine, Toolchains};

use crate::workspace_root;

/// What is kept in the target directory between runs (`name` under it).
fn kept(name: &str) -> PathBuf {
    // The library is built without CARGO_TARGET_TMPDIR (only tests and
    // benches get it): find the target directory from the running binary,
    // target/<profile>/deps/<binary>.
    let exe = std::env::current_exe().expect("the running binary's path");
    let target = exe
        .ancestors()
        .nth(3)
        .map(Path::to_path_buf)
        .unwrap_or_else(std::env::temp_dir);
    target.join("tmp").join(name)
}

/// Where componentize-js and componentize-py are installed for the tests:
/// `$IDEM_TOOLCHAIN_DIR`, else kept in the target directory.
pub fn toolchain_dir() -> PathBuf {
    std::env::var_os("IDEM_TOOLCHAIN_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| kept("toolchains"))
}

/// The artifact cache for the ports: a 12–19 MB component compiles once.
pub fn cache_dir() -> PathBuf {
    kept("ports-cache")
}

/// The ports, as [`component`] names them: JavaScript built with
/// StarlingMonkey (`js`) and with QuickJS (`js-quickjs`), and Python.
pub const PORTS: [&str; 3] = ["js", "js-quickjs", "python"];

/// A port's language (its directory under `guest/`) and JavaScript engine.
pub fn language_of(port: &str) -> (&'static str, JsEngine) {
    match port {
        "js" => ("js", JsEngine::StarlingMonkey),
        "js-quickjs" => ("js", JsEngine::QuickJs),
        "python" => ("python", JsEngine::default()),
        _ => panic!("no port `{port}`: the ports are {PORTS:?}"),
    }
}

/// The port of `policy` (`billing-charge`, …) as `port` (one of [`PORTS`])
/// builds it, built when its sources changed since the last build.
pub fn component(port: &str, policy: &str) -> PathBuf {
    // One build at a time: they share the toolchains, and two cores.
    static BUILDING: Mutex<()> = Mutex::new(());
    let _one = BUILDING.lock().unwrap_or_else(|e| e.into_inner());
    let (lang, engine) = language_of(port);
    let root = workspace_root();
    let languages = root.join("guest").join(lang);
    let project = languages.join("policies").join(policy);
    let inputs = sources_digest(&[
        &project,
        &languages.join("sdk"),
        &root.join("wit"),
        &root.join("guest/build/src"),
        &root.join("guest/build/js"),
    ]);
    let builds = kept("ports").join(port).join(policy);
    let out = builds.join(&inputs[..16]);
    let component = out.join(format!("{policy}.wasm"));
    if !component.is_file() {
        // Builds of older sources go: only the latest is used.
        let _ = std::fs::remove_dir_all(&builds);
        idem_guest_build::build_project(
            &project,
            Some(&out),
            engine,
            &Toolchains::new(toolchain_dir()),
        )
        .unwrap_or_else(|e| panic!("building the {port} {policy}: {e:#}"));
    }
    component
}

/// A digest of every file under `dirs` (names and contents), leaving out
/// what builds and tests leave behind.
fn sources_digest(dirs: &[&Path]) -> String {
    fn walk(dir: &Path, files: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name();
            let skipped = name.to_str().is_none_or(|n| {
                n.starts_with('.') || matches!(n, "__pycache__" | "node_modules" | "dist" | "tests")
            });
            if skipped {
                continue;
            }
            if path.is_dir() {
                walk(&path, files);
            } else {
                files.push(path);
            }
        }
    }
    let mut files = Vec::new();
    for dir in dirs {
        walk(dir, &mut files);
    }
    files.sort();
    let mut text = Vec::new();
    for file in files {
        text.extend_from_slice(file.to_string_lossy().as_bytes());
        text.push(0);
        text.extend(std::fs::read(&file).unwrap_or_default());
        text.push(0);
    }
    idem::core::Digest::of_bytes(&text).to_hex()
}
