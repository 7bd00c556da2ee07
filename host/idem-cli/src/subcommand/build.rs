//! `idem build`: a policy project to a component, from any directory, in
//! Rust (`Cargo.toml`), JavaScript (`package.json`) or Python
//! (`pyproject.toml`), with nothing but this binary and the language's own
//! runtime: the wasm target, componentize-js or componentize-py is
//! installed on first use (`idem_guest_build`). The component is then
//! loaded here as any host would load it, so what this command prints is a
//! policy the host accepts, already compiled into the cache; one the host
//! refuses is removed.

use std::path::PathBuf;
use std::time::Instant;

use clap::{Args, ValueEnum};
use idem::policy::default_cache_dir;
use idem_guest_build::{JsEngine, Language, Toolchains, find_project};

use crate::exit::{Failure, SUCCESS};
use crate::policy_args::RuntimeArgs;
use crate::shown::tell;

/// `idem build`'s flags.
#[derive(Args, Debug)]
pub struct BuildArgs {
    /// The policy project: its directory, or its Cargo.toml, package.json
    /// or pyproject.toml.
    #[arg(value_name = "PATH", default_value = ".")]
    pub path: PathBuf,
    /// Where the component goes [default: `policies/` in a crate's target
    /// directory; `dist/` of a JavaScript or Python project].
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Do not load the component in the host afterwards (nor compile it
    /// into the cache).
    #[arg(long)]
    pub no_check: bool,
    /// The engine a JavaScript policy is built into: StarlingMonkey
    /// (componentize-js: SpiderMonkey's language, a 12 MB component) or
    /// QuickJS (componentize-qjs: QuickJS-ng, a 1.8 MB component whose
    /// derive costs a seventh of the fuel). The same source and SDK derive
    /// the same keys with either.
    #[arg(
        long,
        value_enum,
        value_name = "ENGINE",
        env = "IDEM_JS_ENGINE",
        default_value_t = JsEngineArg::Starlingmonkey
    )]
    pub js_engine: JsEngineArg,
    #[command(flatten)]
    pub runtime: RuntimeArgs,
}

/// `--js-engine`'s values.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum JsEngineArg {
    /// StarlingMonkey, through componentize-js.
    Starlingmonkey,
    /// QuickJS-ng, through componentize-qjs.
    Quickjs,
}

impl From<JsEngineArg> for JsEngine {
    fn from(arg: JsEngineArg) -> Self {
        match arg {
            JsEngineArg::Starlingmonkey => JsEngine::StarlingMonkey,
            JsEngineArg::Quickjs => JsEngine::QuickJs,
        }
    }
}

/// Runs `idem build`: prints the component's path on stdout.
pub fn run(args: BuildArgs) -> Result<u8, Failure> {
    let cannot =
        |e: anyhow::Error| Failure::input(format!("cannot build {}: {e:#}", args.path.display()));
    let (language, _) = find_project(&args.path).map_err(cannot)?;
    let engine = JsEngine::from(args.js_engine);
    // A first build installs or compiles a toolchain, a minute or two: say
    // so, and let the tool's own progress show beneath.
    eprintln!(
        "idem: building {} ({})",
        args.path.display(),
        what_happens(language, engine)
    );
    let toolchains = Toolchains::from_env(default_cache_dir().as_deref()).map_err(cannot)?;
    let (_, built) =
        idem_guest_build::build_project(&args.path, args.out.as_deref(), engine, &toolchains)
            .map_err(|e| cannot(told(e)))?;
    if !args.no_check {
        let started = Instant::now();
        let policy = args
            .runtime
            .runtime()?
            .load(&built.component)
            .map_err(|e| {
                // What the host refuses is no policy: leave none behind to
                // be deployed by mistake.
                let removed = match std::fs::remove_file(&built.component) {
                    Ok(()) => "; nothing was written".to_string(),
                    Err(why) => format!("; {} is left ({why})", built.component.display()),
                };
                Failure::input(format!(
                    "the host refuses what was built: {}{removed}",
                    e.message
                ))
            })?;
        let bytes = std::fs::metadata(&built.component)
            .map(|m| m.len())
            .unwrap_or(0);
        let info = policy.info();
        eprintln!(
            "idem: {} {} ({}, {:.1} MB) loads in this host; ready in {:.1} s",
            info.name,
            info.version,
            policy.digest(),
            bytes as f64 / 1e6,
            started.elapsed().as_secs_f64()
        );
    }
    println!("{}", built.component.display());
    Ok(SUCCESS)
}

/// A failed build's error, its tool's output (the lines after the first)
/// printed first, a line at a time, indented: a compiler's message keeps its
/// shape (esbuild's caret under the column, Python's traceback) and each line
/// is escaped on its own. What is left is the headline, printed last.
fn told(e: anyhow::Error) -> anyhow::Error {
    let text = format!("{e:#}");
    let Some((head, output)) = text.split_once('\n') else {
        return e;
    };
    for line in output.lines() {
        tell!("    {line}");
    }
    anyhow::anyhow!("{}; its output is above", head.trim_end_matches(':'))
}

/// What the build runs, in a few words.
fn what_happens(language: Language, engine: JsEngine) -> String {
    match language {
        Language::Rust => format!(
            "Rust, for {}, release, size-optimised; a first build compiles the SDK's dependencies, cargo's progress follows",
            idem_guest_build::GUEST_TARGET
        ),
        Language::JavaScript => match engine {
            JsEngine::StarlingMonkey => format!(
                "JavaScript: esbuild {}, then componentize-js {} (StarlingMonkey); 10 to 50 s",
                idem_guest_build::toolchain::ESBUILD,
                idem_guest_build::toolchain::COMPONENTIZE_JS
            ),
            JsEngine::QuickJs => format!(
                "JavaScript: esbuild {}, then componentize-qjs {} (QuickJS); about 5 s",
                idem_guest_build::toolchain::ESBUILD,
                idem_guest_build::toolchain::COMPONENTIZE_QJS
            ),
        },
        Language::Python => format!(
            "Python: componentize-py {}; about 30 s",
            idem_guest_build::toolchain::COMPONENTIZE_PY
        ),
    }
}
