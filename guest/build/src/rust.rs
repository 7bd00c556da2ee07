//! Rust policies: a library crate using the `idem-policy` SDK, compiled for
//! `wasm32-unknown-unknown` (which, unlike `wasm32-wasip2`, pulls in no WASI
//! imports from std: see `docs/guide/writing-a-policy.md`) as a `cdylib`,
//! then wrapped into a component with `wit-component`, using the
//! component-type section that `wit-bindgen` embedded. The wasm target is
//! added with `rustup target add` when it is missing: no hand step.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::BuiltGuest;
use crate::sections::{add_sections, write_if_changed};

/// The target every policy is built for.
pub const GUEST_TARGET: &str = "wasm32-unknown-unknown";
/// The cargo profile policies are built with. It is defined on the command
/// line (see [`GUEST_PROFILE_CONFIG`]), so any policy crate builds without
/// adding it to its own manifest.
pub const GUEST_PROFILE: &str = "idem-guest";

/// Policies are small and loaded often: optimise for size, one codegen unit,
/// LTO, no unwinding (a panic is a trap either way), no debug info.
pub const GUEST_PROFILE_CONFIG: &[&str] = &[
    "profile.idem-guest.inherits=\"release\"",
    "profile.idem-guest.opt-level=\"s\"",
    "profile.idem-guest.lto=true",
    "profile.idem-guest.codegen-units=1",
    "profile.idem-guest.strip=true",
    "profile.idem-guest.panic=\"abort\"",
    "profile.idem-guest.debug=false",
    // A policy needs little stack; Rust's default 1 MiB shadow stack would be
    // part of every fresh instance's memory. 64 KiB keeps instances small
    // (and a runaway recursion still traps cleanly).
    "target.wasm32-unknown-unknown.rustflags=[\"-C\", \"link-arg=-zstack-size=65536\"]",
];

/// The cargo to run: `$CARGO` when set (a build script, `cargo xtask`),
/// else `cargo` from `PATH` (rustup's proxy).
pub fn cargo_binary() -> PathBuf {
    std::env::var_os("CARGO")
        .map(PathBuf::from)
        .unwrap_or_else(|| "cargo".into())
}

/// A policy crate on disk, as cargo sees it.
#[derive(Debug, Clone)]
pub struct PolicyCrate {
    /// Its `Cargo.toml`.
    pub manifest: PathBuf,
    /// Its package name (the component is `<package>.wasm`).
    pub package: String,
    /// The target directory cargo uses for it (its workspace's, or
    /// `$CARGO_TARGET_DIR`).
    pub target_dir: PathBuf,
}

impl PolicyCrate {
    /// Finds the policy crate at `path` (its directory or its
    /// `Cargo.toml`) by asking `cargo metadata`, so a crate inside any
    /// workspace, with any target directory, is found as cargo would find
    /// it. Refuses a directory without a manifest, a workspace manifest
    /// without a package, and a package that does not depend on the
    /// `idem-policy` SDK, each saying so.
    pub fn locate(path: &Path, cargo: &Path) -> Result<Self> {
        let manifest = if path.is_dir() {
            path.join("Cargo.toml")
        } else {
            path.to_path_buf()
        };
        if !manifest.is_file() {
            if path.exists() {
                bail!(
                    "{} has no Cargo.toml: a policy is a Rust crate (make one with `idem new NAME`)",
                    path.display()
                );
            }
            bail!("{} does not exist", path.display());
        }
        let manifest = manifest
            .canonicalize()
            .with_context(|| format!("cannot resolve {}", manifest.display()))?;
        let out = Command::new(cargo)
            .args(["metadata", "--no-deps", "--format-version", "1"])
            .arg("--manifest-path")
            .arg(&manifest)
            .output()
            .with_context(|| format!("cannot run {}", cargo.display()))?;
        if !out.status.success() {
            bail!(
                "cargo cannot read {}: {}",
                manifest.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        let metadata: serde_json::Value = serde_json::from_slice(&out.stdout)
            .context("cargo metadata printed something that is not JSON")?;
        let package = metadata["packages"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|p| p["manifest_path"].as_str().map(Path::new) == Some(manifest.as_path()))
            .with_context(|| {
                format!(
                    "{} is a workspace, not a package: name the policy crate's own directory",
                    manifest.display()
                )
            })?;
        let name = package["name"]
            .as_str()
            .context("cargo metadata names no package")?
            .to_string();
        let uses_sdk = package["dependencies"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|d| d["name"] == "idem-policy");
        if !uses_sdk {
            bail!(
                "package `{name}` ({}) does not depend on idem-policy, the policy SDK: it cannot be a policy",
                manifest.display()
            );
        }
        let target_dir = metadata["target_directory"]
            .as_str()
            .map(PathBuf::from)
            .context("cargo metadata names no target directory")?;
        Ok(PolicyCrate {
            manifest,
            package: name,
            target_dir,
        })
    }
}

/// Builds the policy crate at `path` (its directory or its `Cargo.toml`)
/// into `<out_dir>/<package>.wasm`; without `out_dir`, into `policies/` of
/// the crate's target directory. The wasm build itself goes to
/// `idem-guests/` of that target directory, apart from native builds.
pub fn build_crate(path: &Path, out_dir: Option<&Path>) -> Result<BuiltGuest> {
    let cargo = cargo_binary();
    let found = PolicyCrate::locate(path, &cargo)?;
    let build = GuestBuild {
        out_dir: out_dir
            .map(Path::to_path_buf)
            .unwrap_or_else(|| found.target_dir.join("policies")),
        target_dir: found.target_dir.join("idem-guests"),
        manifest: found.manifest,
        cargo,
        keep_core_module: false,
    };
    let mut built = build.build(&[&found.package])?;
    Ok(built.remove(0))
}

/// How to build.
#[derive(Debug, Clone)]
pub struct GuestBuild {
    /// The workspace (or package) manifest the packages belong to.
    pub manifest: PathBuf,
    /// Cargo's target directory for the wasm build (kept apart from the
    /// native one, so a build script can run this without deadlocking on
    /// cargo's lock).
    pub target_dir: PathBuf,
    /// Where the components are written.
    pub out_dir: PathBuf,
    /// The cargo binary (a build script passes `$CARGO`).
    pub cargo: PathBuf,
    /// Also write `<out_dir>/<package>.core.wasm`, the core module before
    /// componentising (test fixtures want it; a policy author does not).
    pub keep_core_module: bool,
}

impl GuestBuild {
    /// Builds each package and writes `<out_dir>/<package>.wasm` (the
    /// component) and, if asked, `<out_dir>/<package>.core.wasm` (the core
    /// module).
    pub fn build(&self, packages: &[&str]) -> Result<Vec<BuiltGuest>> {
        ensure_target(GUEST_TARGET)?;
        std::fs::create_dir_all(&self.out_dir)
            .with_context(|| format!("cannot create {}", self.out_dir.display()))?;
        let sources = PolicySources::all(&self.manifest, &self.cargo)?;
        packages
            .iter()
            .map(|p| self.build_one(p, &sources))
            .collect()
    }

    fn build_one(
        &self,
        package: &str,
        sources: &HashMap<String, PolicySources>,
    ) -> Result<BuiltGuest> {
        let sources = sources.get(package).cloned().unwrap_or_default();
        let mut cmd = Command::new(&self.cargo);
        // Not `--quiet`: cargo's own progress (its bar on a terminal, a line
        // per crate elsewhere) is what tells a first build, which compiles
        // the SDK's dependencies for wasm, from a hung one.
        cmd.args([
            "rustc",
            "--lib",
            "--crate-type",
            "cdylib",
            "--target",
            GUEST_TARGET,
        ])
        .args(["--profile", GUEST_PROFILE, "--package", package])
        .arg("--manifest-path")
        .arg(&self.manifest)
        .arg("--target-dir")
        .arg(&self.target_dir);
        for setting in GUEST_PROFILE_CONFIG {
            cmd.args(["--config", setting]);
        }
        scrub_cargo_env(&mut cmd);
        let status = cmd
            .status()
            .with_context(|| format!("cannot run {}", self.cargo.display()))?;
        if !status.success() {
            bail!("building policy `{package}` for {GUEST_TARGET} failed ({status})");
        }
        let artifact = package.replace('-', "_");
        let core_path = self
            .target_dir
            .join(GUEST_TARGET)
            .join(GUEST_PROFILE)
            .join(format!("{artifact}.wasm"));
        let core = std::fs::read(&core_path)
            .with_context(|| format!("cannot read {}", core_path.display()))?;
        let component = componentize(&core)
            .with_context(|| format!("cannot make a component of `{package}`"))?;
        let component = add_sections(
            component,
            sources.lifecycle.as_deref(),
            sources.cases.as_deref(),
        );
        let component_path = self.out_dir.join(format!("{package}.wasm"));
        write_if_changed(&component_path, &component)?;
        let core_module = if self.keep_core_module {
            let core_copy = self.out_dir.join(format!("{package}.core.wasm"));
            write_if_changed(&core_copy, &core)?;
            Some(core_copy)
        } else {
            None
        };
        Ok(BuiltGuest {
            package: package.to_string(),
            component: component_path,
            core_module,
        })
    }
}

/// What a policy crate says about its own life beside its code.
#[derive(Debug, Clone, Default)]
pub struct PolicySources {
    /// `[package.metadata.idem]` of its `Cargo.toml`, as JSON text (e.g.
    /// `{"keep-operations":false,"replaces":"sha256:…"}`): the lifecycle
    /// manifest. The host checks it when it loads the component.
    pub lifecycle: Option<String>,
    /// The `cases.json` beside its `Cargo.toml`: its golden vectors.
    pub cases: Option<Vec<u8>>,
}

impl PolicySources {
    /// Reads them for every package of the workspace at `manifest`, by
    /// name (one `cargo metadata`).
    pub fn all(manifest: &Path, cargo: &Path) -> Result<HashMap<String, Self>> {
        let mut cmd = Command::new(cargo);
        cmd.args(["metadata", "--no-deps", "--format-version", "1"])
            .arg("--manifest-path")
            .arg(manifest);
        scrub_cargo_env(&mut cmd);
        let out = cmd
            .output()
            .with_context(|| format!("cannot run {}", cargo.display()))?;
        if !out.status.success() {
            bail!(
                "cargo metadata failed for {}: {}",
                manifest.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        let metadata: serde_json::Value = serde_json::from_slice(&out.stdout)
            .context("cargo metadata printed something that is not JSON")?;
        let mut all = HashMap::new();
        for found in metadata["packages"].as_array().into_iter().flatten() {
            let Some(package) = found["name"].as_str() else {
                continue;
            };
            let lifecycle = match &found["metadata"]["idem"] {
                serde_json::Value::Null => None,
                value => Some(value.to_string()),
            };
            let dir = found["manifest_path"]
                .as_str()
                .map(Path::new)
                .and_then(Path::parent)
                .with_context(|| format!("cargo metadata gives `{package}` no manifest path"))?;
            let cases = crate::read_cases(dir)?;
            all.insert(package.to_string(), PolicySources { lifecycle, cases });
        }
        Ok(all)
    }
}

/// Wraps a core module built with `wit-bindgen` into a component.
pub fn componentize(core_module: &[u8]) -> Result<Vec<u8>> {
    wit_component::ComponentEncoder::default()
        .module(core_module)?
        .validate(true)
        .encode()
}

/// Adds a rustup target if it is not installed yet. Without rustup (a distro
/// toolchain) the build itself will say what is missing.
pub fn ensure_target(target: &str) -> Result<()> {
    let installed = match Command::new("rustup")
        .args(["target", "list", "--installed"])
        .output()
    {
        Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout).into_owned(),
        _ => return Ok(()),
    };
    if installed.lines().any(|l| l.trim() == target) {
        return Ok(());
    }
    let status = Command::new("rustup")
        .args(["target", "add", target])
        .status()
        .context("cannot run rustup")?;
    if !status.success() {
        bail!("`rustup target add {target}` failed ({status})");
    }
    Ok(())
}

/// A nested cargo inherits the outer build's environment; flags and jobserver
/// settings meant for the native build must not leak into the wasm build.
fn scrub_cargo_env(cmd: &mut Command) {
    for (key, _) in std::env::vars_os() {
        let Some(key) = key.to_str() else { continue };
        let keep = matches!(
            key,
            "CARGO_HOME" | "CARGO_NET_OFFLINE" | "CARGO_REGISTRIES_CRATES_IO_PROTOCOL"
        );
        let leaks = (key.starts_with("CARGO_") && !keep)
            || matches!(
                key,
                "RUSTFLAGS"
                    | "RUSTC"
                    | "RUSTC_WRAPPER"
                    | "RUSTC_WORKSPACE_WRAPPER"
                    | "RUSTDOCFLAGS"
            )
            || matches!(
                key,
                "MAKEFLAGS"
                    | "MFLAGS"
                    | "OUT_DIR"
                    | "TARGET"
                    | "HOST"
                    | "PROFILE"
                    | "OPT_LEVEL"
                    | "DEBUG"
                    | "NUM_JOBS"
            );
        if leaks {
            cmd.env_remove(key);
        }
    }
}
