//! The language toolchains a JavaScript or Python policy is built with, at
//! pinned versions, installed by idem itself on first use from the package
//! registries (npm, PyPI) into a directory of its own: never a hand step,
//! never a global install, and never a binary fetched from anywhere else
//! (so `--aot`, which downloads weval at build time, is not used).
//!
//! Two builds starting at once (tests, a CI matrix) install once: an
//! install holds a file lock, and a toolchain counts as installed only once
//! its marker file is written, so an install cut short is redone.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use anyhow::{Context, Result, bail};

/// componentize-js: JavaScript (StarlingMonkey, a SpiderMonkey build for
/// WebAssembly) to a component. The version the host is tested with.
pub const COMPONENTIZE_JS: &str = "0.23.0";
/// componentize-qjs: JavaScript (QuickJS-ng, through rquickjs) to a
/// component, `idem build --js-engine quickjs`. It comes with
/// componentize-js's own npm tree (jco depends on it, its engine prebuilt in
/// the package); it is pinned here beside it, so that tree cannot move it.
pub const COMPONENTIZE_QJS: &str = "0.4.5";
/// esbuild: bundles a policy and its imports (`@idem/policy`, npm packages)
/// into one module, which componentize-js needs (it resolves no package
/// imports itself).
pub const ESBUILD: &str = "0.25.12";
/// componentize-py: Python (CPython 3.14 inside) to a component.
pub const COMPONENTIZE_PY: &str = "0.25.1";
/// The Node.js major version componentize-js needs.
pub const NODE_MAJOR: u32 = 20;

/// Where the toolchains live.
#[derive(Debug, Clone)]
pub struct Toolchains {
    dir: PathBuf,
}

/// The JavaScript tools.
#[derive(Debug, Clone)]
pub struct JsTools {
    /// The `componentize-js` command.
    pub componentize_js: PathBuf,
    /// The `componentize-qjs` command.
    pub componentize_qjs: PathBuf,
    /// The `esbuild` command.
    pub esbuild: PathBuf,
}

/// The file whose presence says a toolchain's install finished.
const INSTALLED: &str = ".idem-installed";

impl Toolchains {
    /// Toolchains kept in `dir` (created when needed).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Toolchains { dir: dir.into() }
    }

    /// `$IDEM_TOOLCHAIN_DIR`, else `toolchains/` of idem's cache directory.
    pub fn from_env(cache_dir: Option<&Path>) -> Result<Self> {
        if let Some(dir) = std::env::var_os("IDEM_TOOLCHAIN_DIR") {
            return Ok(Toolchains::new(dir));
        }
        match cache_dir {
            Some(cache) => Ok(Toolchains::new(cache.join("toolchains"))),
            None => bail!(
                "no directory for the language toolchains: set IDEM_TOOLCHAIN_DIR (or IDEM_CACHE_DIR, or HOME)"
            ),
        }
    }

    /// Their directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// componentize-js, componentize-qjs and esbuild, installed with npm
    /// when missing.
    pub fn javascript(&self) -> Result<JsTools> {
        let name = format!(
            "js-componentize-js-{COMPONENTIZE_JS}-qjs-{COMPONENTIZE_QJS}-esbuild-{ESBUILD}"
        );
        let what = format!(
            "componentize-js {COMPONENTIZE_JS}, componentize-qjs {COMPONENTIZE_QJS} and esbuild {ESBUILD}"
        );
        let home = self.installed(&name, &what, "the npm registry", |dir| {
            check_node()?;
            let mut npm = Command::new("npm");
            npm.args(["install", "--no-audit", "--no-fund", "--ignore-scripts"])
                .arg("--prefix")
                .arg(dir)
                .arg(format!(
                    "@bytecodealliance/componentize-js@{COMPONENTIZE_JS}"
                ))
                .arg(format!("componentize-qjs@{COMPONENTIZE_QJS}"))
                .arg(format!("esbuild@{ESBUILD}"));
            run(&mut npm, "npm install")
        })?;
        let bin = home.join("node_modules").join(".bin");
        Ok(JsTools {
            componentize_js: bin.join("componentize-js"),
            componentize_qjs: bin.join("componentize-qjs"),
            esbuild: native_esbuild(&home).unwrap_or_else(|| bin.join("esbuild")),
        })
    }

    /// The `componentize-py` command, installed with pip into a virtual
    /// environment of its own when missing.
    pub fn python(&self) -> Result<PathBuf> {
        let name = format!("python-componentize-py-{COMPONENTIZE_PY}");
        let what = format!("componentize-py {COMPONENTIZE_PY}");
        let home = self.installed(&name, &what, "PyPI", |dir| {
            let python = python3()?;
            let mut venv = Command::new(&python);
            venv.args(["-m", "venv"]).arg(dir);
            run(&mut venv, &format!("{python} -m venv"))?;
            let mut pip = Command::new(dir.join("bin").join("pip"));
            pip.args(["install", "--disable-pip-version-check", "--no-input"])
                .arg(format!("componentize-py=={COMPONENTIZE_PY}"));
            run(&mut pip, "pip install")
        })?;
        Ok(home.join("bin").join("componentize-py"))
    }

    /// `<dir>/<name>`, installed by `install` unless an earlier install
    /// finished.
    fn installed(
        &self,
        name: &str,
        what: &str,
        from: &str,
        install: impl FnOnce(&Path) -> Result<()>,
    ) -> Result<PathBuf> {
        let home = self.dir.join(name);
        if home.join(INSTALLED).is_file() {
            return Ok(home);
        }
        std::fs::create_dir_all(&self.dir)
            .with_context(|| format!("cannot create {}", self.dir.display()))?;
        let lock_path = self.dir.join(format!("{name}.lock"));
        let lock = File::create(&lock_path)
            .with_context(|| format!("cannot create {}", lock_path.display()))?;
        lock.lock()
            .with_context(|| format!("cannot lock {}", lock_path.display()))?;
        // Another build may have installed it while this one waited.
        if home.join(INSTALLED).is_file() {
            return Ok(home);
        }
        if home.exists() {
            // An install cut short: start again.
            std::fs::remove_dir_all(&home)
                .with_context(|| format!("cannot remove {}", home.display()))?;
        }
        eprintln!(
            "idem: installing {what} into {} (once, from {from})",
            home.display()
        );
        install(&home).with_context(|| {
            format!(
                "cannot install {what} into {}; to use another directory set IDEM_TOOLCHAIN_DIR",
                home.display()
            )
        })?;
        std::fs::write(home.join(INSTALLED), format!("{what}\n"))
            .with_context(|| format!("cannot write into {}", home.display()))?;
        Ok(home)
    }
}

/// esbuild's own binary for this platform (`@esbuild/<platform>`), when
/// npm installed it: the `esbuild` command is a Node.js script that runs it
/// and, when it fails, adds its own stack trace to esbuild's message.
fn native_esbuild(home: &Path) -> Option<PathBuf> {
    let platforms = std::fs::read_dir(home.join("node_modules").join("@esbuild")).ok()?;
    platforms
        .filter_map(Result::ok)
        .map(|p| p.path().join("bin").join("esbuild"))
        .find(|binary| binary.is_file())
}

/// Runs `cmd`, failing with what it printed.
pub(crate) fn run(cmd: &mut Command, what: &str) -> Result<()> {
    let out: Output = cmd.output().with_context(|| format!("cannot run {what}"))?;
    if !out.status.success() {
        bail!(
            "{what} failed ({}):\n{}",
            out.status,
            printed(&out.stderr, &out.stdout)
        );
    }
    Ok(())
}

/// The most lines of a tool's output a failure shows.
const MAX_LINES: usize = 200;

/// What a tool printed, its errors first, from the top: a compiler's first
/// error is the one to read (esbuild's file, line and column come first),
/// and only a flood is cut, saying how much.
pub(crate) fn printed(stderr: &[u8], stdout: &[u8]) -> String {
    let stderr = String::from_utf8_lossy(stderr);
    let stdout = String::from_utf8_lossy(stdout);
    let lines: Vec<&str> = stderr
        .lines()
        .chain(stdout.lines())
        .map(str::trim_end)
        .collect();
    // Blank lines at either end say nothing; those between are layout.
    let start = lines
        .iter()
        .position(|l| !l.is_empty())
        .unwrap_or(lines.len());
    let end = lines
        .iter()
        .rposition(|l| !l.is_empty())
        .map_or(start, |i| i + 1);
    let lines = &lines[start..end];
    if lines.len() <= MAX_LINES {
        return lines.join("\n");
    }
    format!(
        "{}\n… ({} more lines)",
        lines[..MAX_LINES].join("\n"),
        lines.len() - MAX_LINES
    )
}

/// Node.js must be there, and new enough.
fn check_node() -> Result<()> {
    let out = Command::new("node").arg("--version").output().with_context(|| {
        format!(
            "cannot run `node`: a JavaScript policy is built with Node.js {NODE_MAJOR} or later and npm; install them"
        )
    })?;
    let version = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let major = version
        .trim_start_matches('v')
        .split('.')
        .next()
        .and_then(|m| m.parse::<u32>().ok());
    match major {
        Some(m) if m >= NODE_MAJOR => Ok(()),
        _ => bail!(
            "Node.js {version} is too old: componentize-js {COMPONENTIZE_JS} needs Node.js {NODE_MAJOR} or later"
        ),
    }
}

/// The Python to make the virtual environment with: `$IDEM_PYTHON`, else
/// `python3`.
fn python3() -> Result<String> {
    let python = std::env::var("IDEM_PYTHON").unwrap_or_else(|_| "python3".to_string());
    let ok = Command::new(&python)
        .args(["-c", "import venv, ensurepip"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if !ok {
        bail!(
            "cannot run `{python}` with its venv and ensurepip modules: a Python policy is built with componentize-py, installed into a virtual environment (install python3 and python3-venv, or set IDEM_PYTHON)"
        );
    }
    Ok(python)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_shows_the_first_lines_whole() {
        let errors: String = (1..=250).map(|i| format!("line {i}\n")).collect();
        let shown = printed(errors.as_bytes(), b"");
        assert!(shown.starts_with("line 1\nline 2\n"), "{shown}");
        assert!(shown.ends_with("line 200\n… (50 more lines)"), "{shown}");
        assert_eq!(printed(b"\n  x\n\n  y\n\n", b"out\n"), "  x\n\n  y\n\nout");
    }
}
