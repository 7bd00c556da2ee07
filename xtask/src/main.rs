//! `cargo xtask`: project automation that needs more than cargo alone.
//!
//! - `cargo xtask build`: the CLI (release) and the example policies as
//!   components in `target/policies/`.
//! - `cargo xtask build-policy PATH [--out DIR]`: one policy crate (any crate
//!   using the idem-policy SDK) to `DIR/<name>.wasm`.
//! - `cargo xtask nightly`: builds everything, then runs the nightly-billing
//!   example job twice on the embedded store: the second run replays every
//!   charge instead of making it again.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use idem_guest_build::{GuestBuild, cargo_binary};

const EXAMPLE_POLICIES: &[&str] = &["billing-charge", "http-idempotency-key", "provider-charge"];

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let root = workspace_root();
    match args.first().map(String::as_str) {
        Some("build") => build_all(&root),
        Some("nightly") => {
            build_all(&root)?;
            nightly(&root)
        }
        Some("build-policy") => {
            let Some(path) = args.get(1) else {
                bail!("usage: cargo xtask build-policy PATH [--out DIR]")
            };
            let out = match (args.get(2).map(String::as_str), args.get(3)) {
                (Some("--out"), Some(dir)) => PathBuf::from(dir),
                (None, _) => target_dir(&root).join("policies"),
                _ => bail!("usage: cargo xtask build-policy PATH [--out DIR]"),
            };
            build_policy(Path::new(path), &out)
        }
        _ => {
            eprintln!("usage: cargo xtask build | nightly | build-policy PATH [--out DIR]");
            std::process::exit(2);
        }
    }
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask sits in the workspace")
        .to_path_buf()
}

fn target_dir(root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"))
}

fn build_all(root: &Path) -> Result<()> {
    let status = Command::new(cargo_binary())
        .args([
            "build",
            "--release",
            "--package",
            "idem-cli",
            "--bin",
            "idem",
        ])
        .current_dir(root)
        .status()
        .context("cannot run cargo")?;
    if !status.success() {
        bail!("building the idem CLI failed ({status})");
    }
    let target = target_dir(root);
    let build = GuestBuild {
        manifest: root.join("Cargo.toml"),
        target_dir: target.join("idem-guests"),
        out_dir: target.join("policies"),
        cargo: cargo_binary(),
        keep_core_module: false,
    };
    for built in build.build(EXAMPLE_POLICIES)? {
        println!("policy  {}", built.component.display());
    }
    println!("cli     {}", target.join("release").join("idem").display());
    Ok(())
}

/// One policy crate, by the same code as `idem build`.
fn build_policy(crate_dir: &Path, out: &Path) -> Result<()> {
    let built = idem_guest_build::build_crate(crate_dir, Some(out))?;
    println!("{}", built.component.display());
    Ok(())
}

/// The nightly-billing job, run twice on a fresh SQLite store.
fn nightly(root: &Path) -> Result<()> {
    let target = target_dir(root);
    let dir = target.join("nightly-demo");
    if dir.exists() {
        std::fs::remove_dir_all(&dir).with_context(|| format!("cannot clear {}", dir.display()))?;
    }
    std::fs::create_dir_all(&dir)?;
    let example = root.join("examples").join("nightly-billing");
    let ops = example.join("ops.jsonl");
    let ledger = dir.join("ledger.txt");
    let store = format!("sqlite:{}", dir.join("idem.db").display());
    let idem = target.join("release").join("idem");
    let policy = target.join("policies").join("billing-charge.wasm");
    let runs = [
        ("nightly-2026-11-30", "scheduled"),
        ("nightly-2026-11-30-rerun", "manual"),
    ];
    for (i, (run_id, trigger)) in runs.iter().enumerate() {
        println!("\n== run {} ({trigger}, run id {run_id})", i + 1);
        let status = Command::new(&idem)
            .arg("run")
            .arg("--policy")
            .arg(&policy)
            .args([
                "--store",
                &store,
                "--concurrency",
                "4",
                "--run-id",
                run_id,
                "--trigger",
                trigger,
            ])
            .arg("--ops")
            .arg(&ops)
            .arg("--")
            .arg(example.join("charge.sh"))
            .env("LEDGER", &ledger)
            .env("IDEM_CACHE_DIR", target.join("idem-cache"))
            .status()
            .with_context(|| format!("cannot run {}", idem.display()))?;
        if !status.success() {
            bail!("run {} failed ({status})", i + 1);
        }
    }
    let operations = std::fs::read_to_string(&ops)?
        .lines()
        .filter(|l| !l.trim().is_empty())
        .count();
    let charges = std::fs::read_to_string(&ledger)?.lines().count();
    println!(
        "\nledger: {charges} charges for {operations} invoices, two runs ({})",
        ledger.display()
    );
    println!("records: {} inspect --store {store}", idem.display());
    if charges != operations {
        bail!("expected exactly one charge per invoice");
    }
    Ok(())
}
