//! `cargo xtask`: project automation that needs more than cargo alone.
//!
//! - `cargo xtask build`: the CLI (release) and the example policies as
//!   components in `target/policies/`.
//! - `cargo xtask build-policy PATH [--out DIR]`: one policy crate (any crate
//!   using the idem-policy SDK) to `DIR/<name>.wasm`, with `idem build`.
//! - `cargo xtask nightly`: builds the CLI and the billing policy, then runs
//!   the nightly-billing example job twice on the embedded store: the second
//!   run replays every charge instead of making it again.
//!
//! xtask depends on nothing but `anyhow`, so `cargo xtask` starts the real
//! build at once: the policies are built by the release CLI's own
//! `idem build`, not by linking the guest build library into xtask (which
//! compiled the component tool chain a second time, unoptimised, before
//! anything else could start).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail};

const EXAMPLE_POLICIES: &[&str] = &["billing-charge", "http-idempotency-key", "provider-charge"];
/// The one policy the nightly job runs.
const NIGHTLY_POLICY: &str = "billing-charge";

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let root = workspace_root();
    match args.first().map(String::as_str) {
        Some("build") => build(&root, EXAMPLE_POLICIES, 2).map(drop),
        Some("nightly") => {
            let idem = build(&root, &[NIGHTLY_POLICY], 3)?;
            nightly(&root, &idem)
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
            let idem = build_cli(&root, 1, 2)?;
            step(2, 2, &format!("the policy at {path}"));
            let built = idem_build(&idem, Path::new(path), &out)?;
            println!("{}", built.display());
            Ok(())
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

fn cargo() -> PathBuf {
    std::env::var_os("CARGO")
        .map(PathBuf::from)
        .unwrap_or_else(|| "cargo".into())
}

/// Announces step `n` of `of`, so a long first build never looks hung.
fn step(n: usize, of: usize, what: &str) {
    println!("\n== [{n}/{of}] {what}");
}

fn done(started: Instant) {
    let s = started.elapsed().as_secs();
    println!("   done in {}m{:02}s", s / 60, s % 60);
}

/// The release CLI, step `n` of `of`; returns its path.
fn build_cli(root: &Path, n: usize, of: usize) -> Result<PathBuf> {
    let idem = target_dir(root).join("release").join("idem");
    step(
        n,
        of,
        "the idem CLI (release), with cargo's progress below; the first build compiles wasmtime: \
         about 10 minutes on 2 cores, seconds after that",
    );
    let started = Instant::now();
    let status = Command::new(cargo())
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
    done(started);
    Ok(idem)
}

/// `idem build CRATE --out OUT`, printing cargo's progress; returns the
/// component's path.
fn idem_build(idem: &Path, crate_dir: &Path, out: &Path) -> Result<PathBuf> {
    let output = Command::new(idem)
        .arg("build")
        .arg(crate_dir)
        .arg("--out")
        .arg(out)
        .stderr(std::process::Stdio::inherit())
        .output()
        .with_context(|| format!("cannot run {}", idem.display()))?;
    if !output.status.success() {
        bail!(
            "building {} failed ({})",
            crate_dir.display(),
            output.status
        );
    }
    let path = String::from_utf8_lossy(&output.stdout).trim().to_string();
    Ok(PathBuf::from(path))
}

/// The CLI, then each policy with it; returns the CLI's path.
fn build(root: &Path, policies: &[&str], of: usize) -> Result<PathBuf> {
    let idem = build_cli(root, 1, of)?;
    step(
        2,
        of,
        &format!("{} policy component(s) with `idem build`", policies.len()),
    );
    let started = Instant::now();
    let out = target_dir(root).join("policies");
    for (i, policy) in policies.iter().enumerate() {
        println!("   ({}/{}) {policy}", i + 1, policies.len());
        let built = idem_build(
            &idem,
            &root.join("guest").join("policies").join(policy),
            &out,
        )?;
        println!("   policy  {}", built.display());
    }
    done(started);
    println!("   cli     {}", idem.display());
    Ok(idem)
}

/// The nightly-billing job, run twice on a fresh SQLite store.
fn nightly(root: &Path, idem: &Path) -> Result<()> {
    step(
        3,
        3,
        "the nightly billing job, twice, on a fresh SQLite store",
    );
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
    let policy = target
        .join("policies")
        .join(format!("{NIGHTLY_POLICY}.wasm"));
    let runs = [
        ("nightly-2026-11-30", "scheduled"),
        ("nightly-2026-11-30-rerun", "manual"),
    ];
    for (i, (run_id, trigger)) in runs.iter().enumerate() {
        println!("\n   run {} ({trigger}, run id {run_id})", i + 1);
        let status = Command::new(idem)
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
