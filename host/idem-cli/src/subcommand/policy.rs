//! `idem policy`: namespace ownership and digest pinning in a store —
//! `activate` (after the gate and the diff), `list`, `rollback`, and
//! `require-registration`.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand};
use idem::lifecycle::{diff_store, run_golden_vectors};
use idem_store::{Activation, Registration, Rollback};
use serde_json::json;

use crate::exit::{Failure, INCOMPLETE, KEYS_WOULD_CHANGE, SUCCESS};
use crate::policy_args::RuntimeArgs;
use crate::shown::{say, tell};
use crate::store_args::{StoreArgs, runtime};
use crate::when;

/// `idem policy`'s subcommands.
#[derive(Args, Debug)]
pub struct PolicyArgs {
    #[command(subcommand)]
    pub command: PolicyCommand,
}

/// What to do.
#[derive(Subcommand, Debug)]
pub enum PolicyCommand {
    /// Make a policy version the active one of its namespace: run its golden
    /// vectors, diff it against the active version over the store's records,
    /// then register and pin its digest.
    Activate(ActivateArgs),
    /// The namespaces a store registered: active digest, accepted digests,
    /// dual-read window, history.
    List(ListArgs),
    /// Make the version active before the current one active again.
    Rollback(RollbackArgs),
    /// Whether claims in a namespace nobody registered are refused.
    RequireRegistration(RequireArgs),
}

/// `idem policy activate`'s flags.
#[derive(Args, Debug)]
pub struct ActivateArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// The policy component (.wasm).
    #[arg(value_name = "P.wasm")]
    pub policy: PathBuf,
    /// Golden vectors shipped beside the component (default: the ones it
    /// carries).
    #[arg(long, value_name = "CASES.json")]
    pub cases: Option<PathBuf>,
    /// Accept a key-changing upgrade (needs --reason; logged).
    #[arg(long, requires = "reason")]
    pub force: bool,
    /// Why (logged; required with --force).
    #[arg(long, value_name = "TEXT")]
    pub reason: Option<String>,
    /// Who activates (default: $USER).
    #[arg(long, value_name = "NAME")]
    pub by: Option<String>,
    /// Open a dual-read window: for this long, claims also look up the key
    /// the replaced version derives (e.g. `30d`).
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub dual_read: Option<Duration>,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub runtime: RuntimeArgs,
}

/// `idem policy list`'s flags.
#[derive(Args, Debug)]
pub struct ListArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// Only this namespace.
    #[arg(long, value_name = "NS")]
    pub namespace: Option<String>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// `idem policy rollback`'s flags.
#[derive(Args, Debug)]
pub struct RollbackArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// The namespace.
    #[arg(long, value_name = "NS")]
    pub namespace: String,
    /// Why (logged).
    #[arg(long, value_name = "TEXT")]
    pub reason: String,
    /// Who (default: $USER).
    #[arg(long, value_name = "NAME")]
    pub by: Option<String>,
}

/// `idem policy require-registration`'s flags.
#[derive(Args, Debug)]
pub struct RequireArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// `on`: claims in a namespace nobody registered are refused; `off`
    /// (the default): such namespaces work as before.
    #[arg(value_parser = ["on", "off"])]
    pub setting: String,
}

/// Runs `idem policy`.
pub fn run(args: PolicyArgs) -> Result<u8, Failure> {
    match args.command {
        PolicyCommand::Activate(a) => activate(a),
        PolicyCommand::List(a) => list(a),
        PolicyCommand::Rollback(a) => rollback(a),
        PolicyCommand::RequireRegistration(a) => runtime()?.block_on(async {
            let store = a.store.open().await?;
            store
                .registry()
                .set_require_registration(a.setting == "on")
                .await
                .map_err(|e| Failure::input(format!("{}: {e}", a.store.shown())))?;
            println!("{}: registration required: {}", a.store.shown(), a.setting);
            Ok(SUCCESS)
        }),
    }
}

fn who(by: Option<String>) -> Result<String, Failure> {
    match by.or_else(|| std::env::var("USER").ok()) {
        Some(by) if !by.trim().is_empty() => Ok(by),
        _ => Err(Failure::input("say who with --by NAME ($USER is not set)")),
    }
}

fn activate(args: ActivateArgs) -> Result<u8, Failure> {
    let by = who(args.by.clone())?;
    let rt = args.runtime.runtime()?;
    let policy = rt.load(&args.policy)?;
    let bytes = std::fs::read(&args.policy)
        .map_err(|e| Failure::input(format!("cannot read {}: {e}", args.policy.display())))?;
    let shipped = match &args.cases {
        Some(path) => Some(
            std::fs::read_to_string(path)
                .map_err(|e| Failure::input(format!("cannot read {}: {e}", path.display())))?,
        ),
        None => None,
    };
    // The gate first: a version that fails its own vectors goes no further.
    let gate = run_golden_vectors(&policy, shipped.as_deref()).map_err(|e| Failure {
        code: INCOMPLETE,
        message: format!("{} is not activated: {e}", policy.digest()),
    })?;
    let namespace = policy.info().namespace.clone();
    runtime()?.block_on(async {
        let store = args.store.open().await?;
        let failed = |e: idem_store::StoreError| Failure::input(format!("{}: {e}", args.store.shown()));
        let current = store.registry().registration(&namespace).await.map_err(failed)?;
        let active = current.as_ref().map(|r| r.active.clone());
        // A version that says which one it replaces replaces only that one.
        if let Some(replaces) = &policy.lifecycle().replaces
            && active.as_ref().is_some_and(|a| a != replaces && a != policy.digest())
        {
            return Err(Failure::input(format!(
                "{} is not activated: it declares that it replaces {replaces}, but the active policy of `{namespace}` is {}",
                policy.digest(),
                active.as_deref().unwrap_or("none")
            )));
        }
        // Then the diff against the active version, over the records it left.
        let mut key_changes = 0;
        let mut diff_json = serde_json::Value::Null;
        if let Some(active) = active.as_ref().filter(|a| *a != policy.digest()) {
            let old_bytes = store
                .registry().policy_component(active)
                .await
                .map_err(failed)?
                .ok_or_else(|| {
                    Failure::input(format!("the store keeps no component for the active {active}"))
                })?;
            let old = rt.load_bytes(&old_bytes)?;
            let report = diff_store(&old, &policy, &store).await.map_err(failed)?;
            key_changes = report.key_changes;
            if !args.json {
                tell!(
                    "diff against the active {}: {} record{} compared, {} key{} would change",
                    active,
                    report.compared,
                    if report.compared == 1 { "" } else { "s" },
                    report.key_changes,
                    if report.key_changes == 1 { "" } else { "s" },
                );
                for g in &report.groups {
                    tell!("  {} operation(s): {}", g.count, g.explanation.join("; "));
                }
                for n in &report.not_diffable {
                    tell!("  not diffable ({}): {}", n.count, n.reason);
                }
            }
            diff_json = serde_json::to_value(&report).unwrap_or_default();
            if key_changes > 0 && !args.force {
                if args.json {
                    println!("{}", json!({ "activated": false, "diff": diff_json }));
                }
                return Err(Failure {
                    code: KEYS_WOULD_CHANGE,
                    message: format!(
                        "{} is not activated: {key_changes} key{} within retention would change (see `idem diff`); accept it with --force --reason TEXT",
                        policy.digest(),
                        if key_changes == 1 { "" } else { "s" }
                    ),
                });
            }
        }
        let registration = store
            .registry().activate_policy(Activation {
                namespace: namespace.clone(),
                digest: policy.digest().to_string(),
                component: bytes,
                expected_active: active.clone(),
                forced: args.force && key_changes > 0,
                by,
                reason: args.reason.clone(),
                dual_read: args.dual_read,
            })
            .await
            .map_err(failed)?;
        if args.json {
            println!(
                "{}",
                serde_json::to_string_pretty(&json!({
                    "activated": true,
                    "registration": registration,
                    "golden_vectors": gate.as_ref().map(|r| r.results.len()),
                    "diff": diff_json,
                }))
                .unwrap_or_default()
            );
        } else {
            match &gate {
                Some(r) => println!("golden vectors: {}", r.summary()),
                None => println!("golden vectors: none (the policy carries none; nothing checked)"),
            }
            println!(
                "{} {} ({}) is the active policy of `{namespace}`{}",
                policy.info().name,
                policy.info().version,
                policy.digest(),
                if active.as_deref() == Some(policy.digest()) {
                    " (it already was)"
                } else {
                    ""
                }
            );
        }
        Ok(SUCCESS)
    })
}

fn list(args: ListArgs) -> Result<u8, Failure> {
    runtime()?.block_on(async {
        let store = args.store.open_existing().await?;
        let failed =
            |e: idem_store::StoreError| Failure::input(format!("{}: {e}", args.store.shown()));
        let all: Vec<Registration> = match &args.namespace {
            Some(n) => store
                .registry()
                .registration(n)
                .await
                .map_err(failed)?
                .into_iter()
                .collect(),
            None => store.registry().registrations().await.map_err(failed)?,
        };
        let required = store
            .registry()
            .requires_registration()
            .await
            .map_err(failed)?;
        if args.json {
            println!(
                "{}",
                serde_json::to_string_pretty(&json!({
                    "require_registration": required,
                    "namespaces": all,
                }))
                .unwrap_or_default()
            );
            return Ok(SUCCESS);
        }
        println!(
            "registration required: {}",
            if required {
                "on"
            } else {
                "off (unregistered namespaces are open)"
            }
        );
        for r in &all {
            say!();
            say!("{}: active {}", r.namespace, r.active);
            say!("  accepted: {}", r.registered.join(", "));
            if let Some(d) = &r.dual_read {
                say!(
                    "  dual read of {} until {}",
                    d.previous,
                    when::utc(d.until_ms)
                );
            }
            for e in &r.history {
                say!(
                    "  {} {} {}{} by {}{}",
                    when::utc(e.at_ms),
                    e.action.as_str(),
                    e.digest,
                    e.previous
                        .as_deref()
                        .map(|p| format!(" (was {p})"))
                        .unwrap_or_default(),
                    e.by,
                    e.reason
                        .as_deref()
                        .map(|r| format!(": {r}"))
                        .unwrap_or_default()
                );
            }
        }
        Ok(SUCCESS)
    })
}

fn rollback(args: RollbackArgs) -> Result<u8, Failure> {
    let by = who(args.by.clone())?;
    runtime()?.block_on(async {
        let store = args.store.open_existing().await?;
        let failed =
            |e: idem_store::StoreError| Failure::input(format!("{}: {e}", args.store.shown()));
        let current = store
            .registry()
            .registration(&args.namespace)
            .await
            .map_err(failed)?
            .ok_or_else(|| {
                Failure::input(format!(
                    "namespace `{}` has no registered policy",
                    args.namespace
                ))
            })?;
        let r = store
            .registry()
            .rollback_policy(Rollback {
                namespace: args.namespace.clone(),
                expected_active: current.active.clone(),
                by,
                reason: args.reason.clone(),
            })
            .await
            .map_err(failed)?;
        say!(
            "`{}`: {} is active again (was {})",
            r.namespace,
            r.active,
            current.active
        );
        Ok(SUCCESS)
    })
}
