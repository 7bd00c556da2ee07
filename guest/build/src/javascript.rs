//! JavaScript policies: a `package.json` project whose main module exports
//! `policy` (made with `definePolicy` of the `@idem/policy` SDK). esbuild
//! bundles it with its imports into one module; componentize-js turns that
//! into a component with every WASI feature disabled, so it imports
//! nothing.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::sections::finish_component;
use crate::toolchain::{JsTools, run};
use crate::{BuiltGuest, POLICY_WIT, WORLD};

/// The SDK package's name.
pub const SDK_PACKAGE: &str = "@idem/policy";

/// The SDK of the source tree this crate was built from, for a project that
/// names no other.
const BUILT_FROM_SDK: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../js/sdk");

/// A JavaScript policy project on disk.
#[derive(Debug, Clone)]
pub struct JsProject {
    /// Its directory.
    pub dir: PathBuf,
    /// Its name (`package.json`'s, without an npm scope): the component is
    /// `<name>.wasm`.
    pub name: String,
    /// The policy module (`main`, default `policy.js`).
    pub main: PathBuf,
    /// Where `@idem/policy` comes from: the `file:` path the project
    /// depends on; else its own `node_modules` (`None`: esbuild resolves it
    /// as Node.js does); else the SDK of the tree idem was built from.
    pub sdk: Option<PathBuf>,
    /// The `"idem"` object (the lifecycle manifest), as JSON text.
    pub lifecycle: Option<String>,
    /// `cases.json` beside `package.json`: the golden vectors.
    pub cases: Option<Vec<u8>>,
}

impl JsProject {
    /// Reads the project whose `package.json` is `manifest`.
    pub fn read(manifest: &Path) -> Result<Self> {
        let dir = manifest
            .parent()
            .context("package.json has no directory")?
            .to_path_buf();
        let text = std::fs::read_to_string(manifest)
            .with_context(|| format!("cannot read {}", manifest.display()))?;
        let json: serde_json::Value = serde_json::from_str(&text)
            .with_context(|| format!("{} is not JSON", manifest.display()))?;
        let full_name = json["name"]
            .as_str()
            .with_context(|| format!("{} has no \"name\"", manifest.display()))?;
        // `@acme/refunds` → `refunds`.
        let name = full_name
            .rsplit('/')
            .next()
            .unwrap_or(full_name)
            .to_string();
        let main = dir.join(json["main"].as_str().unwrap_or("policy.js"));
        if !main.is_file() {
            bail!(
                "{} names {} as the policy module (\"main\"), which does not exist",
                manifest.display(),
                main.display()
            );
        }
        let sdk = match json["dependencies"][SDK_PACKAGE]
            .as_str()
            .and_then(|spec| spec.strip_prefix("file:"))
        {
            Some(path) => {
                let sdk = dir.join(path);
                if !sdk.join("index.js").is_file() {
                    bail!(
                        "{} takes {SDK_PACKAGE} from {}, which is not the SDK (no index.js there): point it at guest/js/sdk of an idem checkout",
                        manifest.display(),
                        sdk.display()
                    );
                }
                Some(sdk)
            }
            // Installed in the project: esbuild finds it as Node.js would.
            None if dir.join("node_modules").join(SDK_PACKAGE).exists() => None,
            None => {
                Some(PathBuf::from(BUILT_FROM_SDK)).filter(|sdk| sdk.join("index.js").is_file())
            }
        };
        let lifecycle = match &json["idem"] {
            serde_json::Value::Null => None,
            value => Some(value.to_string()),
        };
        Ok(JsProject {
            cases: crate::read_cases(&dir)?,
            dir,
            name,
            main,
            sdk,
            lifecycle,
        })
    }

    /// Builds `<out_dir>/<name>.wasm`.
    pub fn build(&self, tools: &JsTools, out_dir: &Path) -> Result<BuiltGuest> {
        let scratch = tempfile::Builder::new()
            .prefix("idem-build-js-")
            .tempdir()
            .context("cannot make a scratch directory")?;
        let wit = scratch.path().join("policy.wit");
        std::fs::write(&wit, POLICY_WIT).context("cannot write the contract")?;
        let bundle = scratch.path().join("policy.bundle.js");
        let mut esbuild = Command::new(&tools.esbuild);
        esbuild
            .current_dir(&self.dir)
            .arg(&self.main)
            .args([
                "--bundle",
                "--format=esm",
                "--platform=neutral",
                "--main-fields=module,main",
                "--log-level=warning",
            ])
            .arg(format!("--outfile={}", bundle.display()));
        if let Some(sdk) = &self.sdk {
            esbuild.arg(format!("--alias:{SDK_PACKAGE}={}", sdk.display()));
        }
        run(
            &mut esbuild,
            "esbuild (bundling the policy and its imports)",
        )?;
        let component = scratch.path().join("policy.wasm");
        let mut componentize = Command::new(&tools.componentize_js);
        // Its working directory is where it resolves relative imports; the
        // bundle has none left.
        componentize
            .current_dir(scratch.path())
            .arg(&bundle)
            .arg("--wit")
            .arg(&wit)
            .args(["--world-name", WORLD])
            // Every WASI feature off: a policy imports nothing.
            .args([
                "--disable",
                "stdio",
                "random",
                "clocks",
                "http",
                "fetch-event",
            ])
            .arg("--out")
            .arg(&component);
        run(&mut componentize, "componentize-js").context(
            "the policy module must export `policy` (made with definePolicy) and use no Node.js API",
        )?;
        finish_component(
            &component,
            &self.name,
            self.lifecycle.as_deref(),
            self.cases.as_deref(),
            out_dir,
        )
    }
}
