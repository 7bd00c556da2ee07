//! Python policies: a `pyproject.toml` project whose module `app.py` binds
//! `Policy = idem_policy.export(...)`. componentize-py turns it into a
//! component with `--stub-wasi`: every WASI import becomes a stub that
//! traps, so the component imports nothing.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::sections::finish_component;
use crate::toolchain::run;
use crate::{BuiltGuest, POLICY_WIT, WORLD};

/// The policy's module: `app.py`.
pub const APP_MODULE: &str = "app";

/// The module componentize-py is given: it imports the policy's module and
/// checks its export while the component is built (componentize-py itself
/// would build a component without `Policy`, which fails only when called).
const ENTRY_MODULE: &str = "idem_entry";
const ENTRY: &str = r#"# Built by idem: the policy's module, its export checked at build time.
import app

Policy = getattr(app, "Policy", None)
if getattr(Policy, "__idem_policy__", None) is None:
    raise ImportError(
        "app.py does not bind `Policy = export(YourPolicy)`: componentize-py exports "
        "the module's `Policy`, made by idem_policy.export"
    )
"#;

/// The SDK's distribution name, as a project depends on it.
pub const SDK_DISTRIBUTION: &str = "idem-policy";

/// The SDK of the source tree this crate was built from, for a project that
/// names no other.
const BUILT_FROM_SDK: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../python/sdk");

/// The SDK's modules that stay out of a component: the native cases runner,
/// its replica of the host, and the test helpers that run `idem`.
const NATIVE_ONLY: &[&str] = &["cases.py", "testing.py", "_host"];

/// A Python policy project on disk.
#[derive(Debug, Clone)]
pub struct PyProject {
    /// Its directory.
    pub dir: PathBuf,
    /// `[project] name`: the component is `<name>.wasm`.
    pub name: String,
    /// The directory holding the `idem_policy` package: the `file://` URL
    /// of the project's `idem-policy @ file:///…` dependency, else the SDK
    /// of the tree idem was built from.
    pub sdk: PathBuf,
    /// `[tool.idem]` (the lifecycle manifest), as JSON text.
    pub lifecycle: Option<String>,
    /// `cases.json` beside `pyproject.toml`: the golden vectors.
    pub cases: Option<Vec<u8>>,
}

impl PyProject {
    /// Reads the project whose `pyproject.toml` is `manifest`.
    pub fn read(manifest: &Path) -> Result<Self> {
        let dir = manifest
            .parent()
            .context("pyproject.toml has no directory")?
            .to_path_buf();
        let text = std::fs::read_to_string(manifest)
            .with_context(|| format!("cannot read {}", manifest.display()))?;
        let toml: toml::Table = text
            .parse()
            .with_context(|| format!("{} is not TOML", manifest.display()))?;
        let project = toml.get("project").and_then(toml::Value::as_table);
        let name = project
            .and_then(|p| p.get("name"))
            .and_then(toml::Value::as_str)
            .with_context(|| format!("{} has no [project] name", manifest.display()))?
            .to_string();
        if !dir.join(format!("{APP_MODULE}.py")).is_file() {
            bail!(
                "{} has no {APP_MODULE}.py: a Python policy's module is {APP_MODULE}.py, ending `Policy = export(YourPolicy)`",
                dir.display()
            );
        }
        let dependencies: Vec<&str> = project
            .and_then(|p| p.get("dependencies"))
            .and_then(toml::Value::as_array)
            .map(|deps| deps.iter().filter_map(toml::Value::as_str).collect())
            .unwrap_or_default();
        let sdk = sdk_dir(&dependencies, manifest)?;
        let lifecycle = match toml.get("tool").and_then(|t| t.get("idem")) {
            None => None,
            Some(value) => Some(
                serde_json::to_string(value)
                    .with_context(|| format!("[tool.idem] of {}", manifest.display()))?,
            ),
        };
        Ok(PyProject {
            cases: crate::read_cases(&dir)?,
            dir,
            name,
            sdk,
            lifecycle,
        })
    }

    /// Builds `<out_dir>/<name>.wasm` with `componentize_py`.
    pub fn build(&self, componentize_py: &Path, out_dir: &Path) -> Result<BuiltGuest> {
        // componentize-py writes `__pycache__` beside every module it
        // pre-initialises, and takes whatever is on its path: give it a copy
        // of exactly the policy's sources and the SDK's policy-side modules.
        let scratch = tempfile::Builder::new()
            .prefix("idem-build-py-")
            .tempdir()
            .context("cannot make a scratch directory")?;
        let wit = scratch.path().join("policy.wit");
        std::fs::write(&wit, POLICY_WIT).context("cannot write the contract")?;
        let app = scratch.path().join("app");
        copy_sources(&self.dir, &app, &[])?;
        let sdk = scratch.path().join("sdk");
        copy_sources(
            &self.sdk.join("idem_policy"),
            &sdk.join("idem_policy"),
            NATIVE_ONLY,
        )?;
        let entry = scratch.path().join("entry");
        std::fs::create_dir_all(&entry).context("cannot make a scratch directory")?;
        std::fs::write(entry.join(format!("{ENTRY_MODULE}.py")), ENTRY)
            .context("cannot write the build's entry module")?;
        let component = scratch.path().join("policy.wasm");
        let mut componentize = Command::new(componentize_py);
        componentize
            .current_dir(scratch.path())
            // A virtual environment's site-packages would join the path.
            .env_remove("VIRTUAL_ENV")
            .env_remove("PYTHONPATH")
            .arg("-q")
            .arg("-d")
            .arg(&wit)
            .args(["-w", WORLD, "componentize", "--stub-wasi"])
            .arg("-p")
            .arg(&app)
            .arg("-p")
            .arg(&sdk)
            .arg("-p")
            .arg(&entry)
            .arg(ENTRY_MODULE)
            .arg("-o")
            .arg(&component)
            // Its own backtrace says nothing about the policy.
            .env("RUST_LIB_BACKTRACE", "0");
        // A Python traceback names each `-p` directory by its place in the
        // list (`/0/app.py`); the author knows the originals.
        run(&mut componentize, "componentize-py").map_err(|e| {
            let text = without_wrapper(&format!("{e:#}"))
                .replace("File \"/0/", &format!("File \"{}/", self.dir.display()))
                .replace("File \"/1/", &format!("File \"{}/", self.sdk.display()));
            anyhow::anyhow!(text)
        })?;
        finish_component(
            &component,
            &self.name,
            self.lifecycle.as_deref(),
            self.cases.as_deref(),
            out_dir,
        )
    }
}

/// `text` without componentize-py's own traceback: its script re-raises a
/// failed build from its entry point (`Traceback … bin/componentize-py …
/// AssertionError: <the build's error>`), which says nothing of the policy.
fn without_wrapper(text: &str) -> String {
    const RERAISED: &str = "AssertionError: ";
    match (
        text.find("Traceback (most recent call last):"),
        text.find(RERAISED),
    ) {
        (Some(start), Some(end)) if start < end && text[start..end].contains("componentize-py") => {
            format!("{}{}", &text[..start], &text[end + RERAISED.len()..])
        }
        _ => text.to_string(),
    }
}

/// The SDK: `idem-policy @ file:///DIR` among the dependencies, else the
/// tree idem was built from.
fn sdk_dir(dependencies: &[&str], manifest: &Path) -> Result<PathBuf> {
    let named = dependencies.iter().find(|d| {
        let name = d
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.'))
            .next()
            .unwrap_or("");
        name.replace('_', "-")
            .eq_ignore_ascii_case(SDK_DISTRIBUTION)
    });
    let from_url = named
        .and_then(|d| d.split_once('@'))
        .map(|(_, url)| url.trim())
        .and_then(|url| url.strip_prefix("file://"));
    let (sdk, from) = match from_url {
        Some(path) => (
            PathBuf::from(path),
            format!(
                "the {SDK_DISTRIBUTION} dependency of {}",
                manifest.display()
            ),
        ),
        None => (
            PathBuf::from(BUILT_FROM_SDK),
            "the tree idem was built from".to_string(),
        ),
    };
    if !sdk.join("idem_policy").join("__init__.py").is_file() {
        bail!(
            "{} (from {from}) is not the idem-policy SDK (no idem_policy/ there): depend on `{SDK_DISTRIBUTION} @ file:///…/guest/python/sdk` of an idem checkout",
            sdk.display()
        );
    }
    Ok(sdk)
}

/// Copies the Python sources under `from` (modules and packages, not tests,
/// builds, caches or hidden directories) to `to`, leaving out `skip`.
fn copy_sources(from: &Path, to: &Path, skip: &[&str]) -> Result<()> {
    std::fs::create_dir_all(to).with_context(|| format!("cannot create {}", to.display()))?;
    let entries =
        std::fs::read_dir(from).with_context(|| format!("cannot read {}", from.display()))?;
    for entry in entries {
        let entry = entry.with_context(|| format!("cannot read {}", from.display()))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if skip.contains(&name) {
            continue;
        }
        let path = entry.path();
        if path.is_dir() {
            let skipped = name.starts_with('.')
                || matches!(name, "__pycache__" | "tests" | "dist" | "build" | "venv");
            if !skipped && path.join("__init__.py").is_file() {
                copy_sources(&path, &to.join(name), &[])?;
            }
        } else if name.ends_with(".py") {
            std::fs::copy(&path, to.join(name))
                .with_context(|| format!("cannot copy {}", path.display()))?;
        }
    }
    Ok(())
}
