//! JavaScript policies: a `package.json` project whose main module exports
//! `policy` (made with `definePolicy` of the `@idem/policy` SDK). esbuild
//! bundles it with its imports into one module; a JavaScript engine for
//! WebAssembly turns that into a component ([`JsEngine`]): componentize-js
//! (StarlingMonkey, the default) with every WASI feature disabled, or
//! componentize-qjs (QuickJS, [`quickjs`]) with WASI stubbed. Either way it
//! imports nothing but the contract's `diagnostics`, through which the SDK
//! reports an uncaught exception with the author's file and line
//! ([`crate::source_map`]).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::sections::finish_component;
use crate::source_map::line_table;
use crate::toolchain::{JsTools, run};
use crate::{BuiltGuest, POLICY_WIT, WORLD};

pub mod quickjs;

/// The JavaScript engine a policy is built into.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum JsEngine {
    /// StarlingMonkey (SpiderMonkey for WebAssembly), through
    /// componentize-js: the full language of a current browser engine; a
    /// component of about 12 MB.
    #[default]
    StarlingMonkey,
    /// QuickJS-ng, through componentize-qjs: a smaller engine (about 1.8 MB
    /// a component) whose derive costs a seventh of the fuel; see
    /// [`quickjs`].
    QuickJs,
}

impl JsEngine {
    /// Its name, as `idem build --js-engine` spells it.
    pub fn name(self) -> &'static str {
        match self {
            JsEngine::StarlingMonkey => "starlingmonkey",
            JsEngine::QuickJs => "quickjs",
        }
    }
}

/// The SDK package's name.
pub const SDK_PACKAGE: &str = "@idem/policy";

/// The contract's diagnostics import, as the bundle imports it.
const DIAGNOSTICS: &str = "idem:policy/diagnostics@0.1.0";
/// The global symbols the SDK reads (`Symbol.for`), as in
/// guest/js/sdk/failure.js.
const FAILING: &str = "idem.policy.failing";
const SOURCE_LINES: &str = "idem.policy.sourceLines";
/// The bundle's file name, as the component's stack traces name it.
const BUNDLE: &str = "policy.bundle.js";

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

    /// Builds `<out_dir>/<name>.wasm` with `engine`.
    pub fn build(&self, tools: &JsTools, engine: JsEngine, out_dir: &Path) -> Result<BuiltGuest> {
        let scratch = tempfile::Builder::new()
            .prefix("idem-build-js-")
            .tempdir()
            .context("cannot make a scratch directory")?;
        let wit = scratch.path().join("policy.wit");
        std::fs::write(&wit, POLICY_WIT).context("cannot write the contract")?;
        let bundle = scratch.path().join(BUNDLE);
        let metafile = scratch.path().join("meta.json");
        // The entry re-exports the policy module; for componentize-js it
        // also binds the host's `failing` where the SDK looks for it
        // (guest/js/sdk/failure.js). A QuickJS component's prelude does that.
        let entry = scratch.path().join("entry.js");
        let main = serde_json::to_string(&self.main.display().to_string())?;
        let entry_text = match engine {
            JsEngine::StarlingMonkey => format!(
                "import {{ failing }} from {DIAGNOSTICS:?};\nexport * from {main};\nglobalThis[Symbol.for({FAILING:?})] = failing;\n"
            ),
            JsEngine::QuickJs => format!("export * from {main};\n"),
        };
        std::fs::write(&entry, entry_text).context("cannot write the bundle's entry")?;
        let mut esbuild = Command::new(&tools.esbuild);
        esbuild
            .current_dir(&self.dir)
            .arg(&entry)
            .args([
                "--bundle",
                "--format=esm",
                "--platform=neutral",
                "--main-fields=module,main",
                "--log-level=warning",
                "--sourcemap",
                "--color=false",
            ])
            .arg(format!("--external:{DIAGNOSTICS}"))
            .arg(format!("--metafile={}", metafile.display()))
            .arg(format!("--outfile={}", bundle.display()));
        if let Some(sdk) = &self.sdk {
            esbuild.arg(format!("--alias:{SDK_PACKAGE}={}", sdk.display()));
        }
        // esbuild's own words (file, line, column and the line itself) are
        // the whole message.
        run(
            &mut esbuild,
            "esbuild (bundling the policy and its imports)",
        )?;
        self.check_exports(&metafile)?;
        self.add_line_table(&bundle)?;
        let component = scratch.path().join("policy.wasm");
        match engine {
            JsEngine::StarlingMonkey => {
                componentize_js(tools, scratch.path(), &bundle, &wit, &component)?
            }
            JsEngine::QuickJs => quickjs::componentize(tools, scratch.path(), &wit, &component)?,
        }
        finish_component(
            &component,
            &self.name,
            self.lifecycle.as_deref(),
            self.cases.as_deref(),
            out_dir,
        )
    }

    /// Refuses a bundle without the `policy` export, by name: componentize-js
    /// would fail later with a message about the world.
    fn check_exports(&self, metafile: &Path) -> Result<()> {
        let text = std::fs::read_to_string(metafile).context("cannot read esbuild's metafile")?;
        let meta: serde_json::Value =
            serde_json::from_str(&text).context("esbuild's metafile is not JSON")?;
        let exports: Vec<&str> = meta["outputs"]
            .as_object()
            .into_iter()
            .flat_map(|outputs| outputs.values())
            .filter_map(|output| output["exports"].as_array())
            .flatten()
            .filter_map(serde_json::Value::as_str)
            .collect();
        if !exports.contains(&"policy") {
            bail!(
                "{} does not export `policy` (it exports {}): end it with `export const policy = definePolicy({{ describe, derive, onDuplicate }})`",
                self.main.display(),
                if exports.is_empty() {
                    "nothing".to_string()
                } else {
                    exports
                        .iter()
                        .map(|e| format!("`{e}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                }
            );
        }
        Ok(())
    }

    /// Appends the bundle's line table (see [`crate::source_map`]), so that
    /// a failure names the author's file and line, not the bundle's.
    fn add_line_table(&self, bundle: &Path) -> Result<()> {
        let map_path = bundle.with_extension("js.map");
        let map = std::fs::read_to_string(&map_path)
            .with_context(|| format!("cannot read {}", map_path.display()))?;
        let map_dir = bundle.parent().context("the bundle has no directory")?;
        let project = self.dir.canonicalize().unwrap_or_else(|_| self.dir.clone());
        let sdk = self.sdk.as_ref().and_then(|s| s.canonicalize().ok());
        let table = line_table(&map, map_dir, |source| {
            let source = source
                .canonicalize()
                .unwrap_or_else(|_| source.to_path_buf());
            if let Some(rel) = sdk.as_ref().and_then(|sdk| source.strip_prefix(sdk).ok()) {
                return format!("{SDK_PACKAGE}/{}", rel.display());
            }
            let shown = source
                .strip_prefix(&project)
                .map(Path::to_path_buf)
                .unwrap_or_else(|_| source.clone());
            let shown = shown.display().to_string();
            // An installed package, the SDK among them, by its own name.
            match shown.rsplit_once("node_modules/") {
                Some((_, package)) => package.to_string(),
                None => shown,
            }
        })?;
        let mut text = std::fs::read_to_string(bundle)
            .with_context(|| format!("cannot read {}", bundle.display()))?;
        // After the last line: the lines above keep their numbers.
        if !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(&table.to_js(SOURCE_LINES, BUNDLE));
        std::fs::write(bundle, text).with_context(|| format!("cannot write {}", bundle.display()))
    }
}

/// componentize-js: the bundle to `component`, every WASI feature off.
fn componentize_js(
    tools: &JsTools,
    scratch: &Path,
    bundle: &Path,
    wit: &Path,
    component: &Path,
) -> Result<()> {
    let mut componentize = Command::new(&tools.componentize_js);
    // Its working directory is where it resolves relative imports; the
    // bundle has none left.
    componentize
        .current_dir(scratch)
        .arg(bundle)
        .arg("--wit")
        .arg(wit)
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
        .arg(component);
    run(&mut componentize, "componentize-js")
}
