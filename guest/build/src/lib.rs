//! Builds idem policies into WebAssembly components, whatever language they
//! are written in.
//!
//! A policy project is found by its manifest: a Rust crate (`Cargo.toml`,
//! using the `idem-policy` SDK: [`rust`]), a JavaScript package
//! (`package.json`, using `@idem/policy`: [`javascript`]) or a Python
//! project (`pyproject.toml`, using `idem_policy`: [`python`]). Each comes
//! out as a component with no imports, its lifecycle manifest and golden
//! vectors (`cases.json`) embedded as custom sections ([`sections`]). The
//! JavaScript and Python toolchains are installed on first use
//! ([`toolchain`]); the Rust one needs only rustup.
//!
//! [`build_project`] builds one project (what `idem build` does);
//! [`GuestBuild`] builds several crates of one workspace (the example
//! policies and test fixtures).

#![warn(missing_docs)]

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

pub mod javascript;
pub mod python;
pub mod rust;
pub mod sections;
pub mod source_map;
pub mod toolchain;

pub use javascript::JsEngine;
pub use rust::{
    GUEST_PROFILE, GUEST_PROFILE_CONFIG, GUEST_TARGET, GuestBuild, PolicyCrate, PolicySources,
    build_crate, cargo_binary, componentize, ensure_target,
};
pub use sections::{CASES_SECTION, LIFECYCLE_SECTION, add_sections};
pub use toolchain::Toolchains;

/// The policy contract, `wit/policy.wit`, as this build knows it: what
/// JavaScript and Python policies are built against (a Rust policy gets it
/// through the SDK's bindings).
pub const POLICY_WIT: &str = include_str!("../wit/policy.wit");

/// The world a policy component implements.
pub const WORLD: &str = "idempotency-policy";

/// One built policy.
#[derive(Debug, Clone)]
pub struct BuiltGuest {
    /// The package name.
    pub package: String,
    /// The component, ready for the idem host.
    pub component: PathBuf,
    /// The core module it was made from (a fixture for "not a component"),
    /// when [`GuestBuild::keep_core_module`] asked for it.
    pub core_module: Option<PathBuf>,
}

/// The language of a policy project.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Language {
    /// A crate (`Cargo.toml`).
    Rust,
    /// A package (`package.json`).
    JavaScript,
    /// A project (`pyproject.toml`).
    Python,
}

impl Language {
    /// The manifest that makes a directory a project in this language.
    pub fn manifest(self) -> &'static str {
        match self {
            Language::Rust => "Cargo.toml",
            Language::JavaScript => "package.json",
            Language::Python => "pyproject.toml",
        }
    }

    /// Its name, as `idem new --lang` spells it.
    pub fn name(self) -> &'static str {
        match self {
            Language::Rust => "rust",
            Language::JavaScript => "js",
            Language::Python => "python",
        }
    }

    const ALL: [Language; 3] = [Language::Rust, Language::JavaScript, Language::Python];
}

/// The project at `path` (its directory, or its manifest) and its manifest.
/// A directory with the manifests of two languages is refused: name the
/// one to build.
pub fn find_project(path: &Path) -> Result<(Language, PathBuf)> {
    if path.is_file() {
        let file = path.file_name().and_then(|f| f.to_str()).unwrap_or("");
        return match Language::ALL.into_iter().find(|l| l.manifest() == file) {
            Some(language) => Ok((language, absolute(path)?)),
            None => bail!(
                "{} is not a policy manifest: name a Cargo.toml, package.json or pyproject.toml, or its directory",
                path.display()
            ),
        };
    }
    if !path.exists() {
        bail!("{} does not exist", path.display());
    }
    let found: Vec<Language> = Language::ALL
        .into_iter()
        .filter(|l| path.join(l.manifest()).is_file())
        .collect();
    match found.as_slice() {
        [language] => Ok((*language, absolute(&path.join(language.manifest()))?)),
        [] => bail!(
            "{} has no Cargo.toml, package.json or pyproject.toml: a policy is a Rust crate, a JavaScript package or a Python project (make one with `idem new NAME --lang rust|js|python`)",
            path.display()
        ),
        several => bail!(
            "{} holds {}: name the manifest of the one to build",
            path.display(),
            several
                .iter()
                .map(|l| l.manifest())
                .collect::<Vec<_>>()
                .join(" and ")
        ),
    }
}

/// Builds the policy project at `path` (its directory or its manifest)
/// into `<out_dir>/<name>.wasm`. Without `out_dir`: a Rust crate's goes to
/// `policies/` of its target directory, a JavaScript or Python project's to
/// its `dist/`. A JavaScript project is built with `js_engine` (the others
/// ignore it). The toolchains a JavaScript or Python build needs are taken
/// from `toolchains`, installed there first when missing.
pub fn build_project(
    path: &Path,
    out_dir: Option<&Path>,
    js_engine: JsEngine,
    toolchains: &Toolchains,
) -> Result<(Language, BuiltGuest)> {
    let (language, manifest) = find_project(path)?;
    let dist = |dir: &Path| {
        out_dir
            .map(Path::to_path_buf)
            .unwrap_or_else(|| dir.join("dist"))
    };
    let built = match language {
        Language::Rust => build_crate(&manifest, out_dir)?,
        Language::JavaScript => {
            let project = javascript::JsProject::read(&manifest)?;
            let tools = toolchains.javascript()?;
            project.build(&tools, js_engine, &dist(&project.dir))?
        }
        Language::Python => {
            let project = python::PyProject::read(&manifest)?;
            let componentize_py = toolchains.python()?;
            project.build(&componentize_py, &dist(&project.dir))?
        }
    };
    Ok((language, built))
}

/// `cases.json` in `dir`, when there is one.
pub(crate) fn read_cases(dir: &Path) -> Result<Option<Vec<u8>>> {
    let path = dir.join("cases.json");
    match std::fs::read(&path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
}

fn absolute(path: &Path) -> Result<PathBuf> {
    path.canonicalize()
        .with_context(|| format!("cannot resolve {}", path.display()))
}
