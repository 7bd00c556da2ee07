//! The QuickJS engine (`idem build --js-engine quickjs`): componentize-qjs
//! 0.4.5 (QuickJS-ng through rquickjs, its engine prebuilt in the npm
//! package) turns the policy's bundle into a component, evaluating the
//! modules at build time and keeping the result in a Wizer snapshot.
//!
//! - `--stub-wasi`: every WASI import is replaced by a trap, so the
//!   component imports nothing but the contract's `diagnostics`;
//! - `--sync`: the runtime without the component model's async ABI, which
//!   the host does not enable;
//! - the module it is given is [`ENTRY`], which imports [`PRELUDE`] (no
//!   clock, a silent `console`, the host's `failing` bound for the SDK) and
//!   then the same bundle componentize-js gets, and exports the bundle's
//!   `policy` with componentize-qjs's value shapes (u64 as a Number, an
//!   absent option as `null`) converted to the SDK's (BigInt, `undefined`)
//!   and back. The same SDK and source thus derive the same keys with either
//!   engine.
//!
//! componentize-qjs resolves the entry's relative imports itself, while it
//! snapshots: the bundle keeps its name and lines, so the line table the
//! build appended to it still maps a QuickJS stack frame
//! (`at derive (policy.bundle.js:12:5)`) to the author's file and line.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result};

use crate::WORLD;
use crate::toolchain::{JsTools, run};

/// The module componentize-qjs is given: see the module's documentation.
pub const ENTRY: &str = include_str!("../../js/quickjs/entry.js");
/// What runs before the policy's bundle: no clock, a silent `console`, the
/// host's `failing` where the SDK looks for it.
pub const PRELUDE: &str = include_str!("../../js/quickjs/prelude.js");

/// Builds `component` from `policy.bundle.js` in `scratch` (with the
/// contract at `wit`).
pub(super) fn componentize(
    tools: &JsTools,
    scratch: &Path,
    wit: &Path,
    component: &Path,
) -> Result<()> {
    let entry = scratch.join("quickjs-entry.js");
    std::fs::write(&entry, ENTRY).context("cannot write the QuickJS entry")?;
    std::fs::write(scratch.join("prelude.js"), PRELUDE)
        .context("cannot write the QuickJS prelude")?;
    let mut componentize = Command::new(&tools.componentize_qjs);
    componentize
        // The entry's imports are resolved from here, read-only.
        .current_dir(scratch)
        .arg("--wit")
        .arg(wit)
        .arg("--js")
        .arg(&entry)
        .arg("--module-root")
        .arg(scratch)
        .args(["--world", WORLD, "--stub-wasi", "--sync"])
        .arg("--output")
        .arg(component);
    run(&mut componentize, "componentize-qjs")
}
