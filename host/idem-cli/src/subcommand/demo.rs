//! `idem demo`: the nightly billing job run twice, overlapping, with an
//! injected pause; guarded by a lease lock alone, by idem, and by idem with
//! each charge written in the store's own transaction; side by side.

use std::path::{Path, PathBuf};

use clap::Args;
use idem::forensics;
use idem::policy::{PolicyRuntime, RuntimeConfig, default_cache_dir};
use idem_sim::{Fault, Guard, Report, Scenario, simulate};
use idem_store::{AttemptFilter, ManualClock, SqliteOptions, SqliteStore, Store, StoreOptions};
use serde_json::json;

use crate::exit::{Failure, SUCCESS};

/// `idem demo`'s flags.
#[derive(Args, Debug)]
pub struct DemoArgs {
    /// Picks the invoice the pause strikes, its length and when the retry
    /// starts; the same seed gives the same run.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// How many customers the job bills.
    #[arg(long, default_value_t = 40, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub customers: u64,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
    /// The billing policy [default: <dir of idem>/../policies/billing-charge.wasm,
    /// where `cargo xtask build` puts it].
    #[arg(long, value_name = "P.wasm")]
    pub policy: Option<PathBuf>,
}

/// `<dir of the idem executable>/../policies/billing-charge.wasm`.
fn default_policy() -> Result<PathBuf, Failure> {
    let exe = std::env::current_exe()
        .map_err(|e| Failure::input(format!("cannot locate the idem executable: {e}")))?;
    // target/<profile>/idem → target/policies (where `cargo xtask build`
    // puts the policies).
    let dir = exe.parent().unwrap_or(Path::new("."));
    let target = dir.parent().unwrap_or(dir);
    Ok(target.join("policies").join("billing-charge.wasm"))
}

/// A temporary directory removed on drop (the demo's SQLite file).
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Result<Self, Failure> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let path = std::env::temp_dir().join(format!("idem-demo-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&path)
            .map_err(|e| Failure::input(format!("cannot create {}: {e}", path.display())))?;
        Ok(TempDir(path))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs `idem demo`.
pub fn run(args: DemoArgs) -> Result<u8, Failure> {
    let policy_path = match &args.policy {
        Some(p) => p.clone(),
        None => default_policy()?,
    };
    if !policy_path.is_file() {
        return Err(Failure::input(format!(
            "no billing policy at {}: build it with `cargo xtask build`, or pass --policy P.wasm",
            policy_path.display()
        )));
    }
    let runtime = PolicyRuntime::new(RuntimeConfig {
        cache_dir: default_cache_dir(),
        max_concurrent_evaluations: 4,
        ..RuntimeConfig::default()
    })
    .map_err(Failure::input)?;
    let policy = runtime.load_file(&policy_path).map_err(|e| {
        Failure::input(format!("cannot load policy {}: {e}", policy_path.display()))
    })?;

    let scenario = Scenario::overlapping_pause(args.seed, args.customers as usize);
    let dir = TempDir::new()?;
    let db = dir.0.join("idem.db");
    // Simulated time: the store's clock starts at the wall clock (so the
    // records look real) and moves only when the simulation says so.
    let clock = ManualClock::new(idem_store::StoreClock::system().now_ms());
    let store = SqliteStore::open(
        &db,
        SqliteOptions::default(),
        StoreOptions {
            clock: clock.store_clock(),
            ..StoreOptions::default()
        },
    )
    .map_err(|e| Failure::input(format!("cannot open store sqlite:{}: {e}", db.display())))?;
    // One thread: the simulation awaits one call at a time anyway.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::input(format!("cannot start the async runtime: {e}")))?;
    // The charges in the store's transaction get a file of their own: the
    // same keys, claimed afresh.
    let in_store_db = dir.0.join("in-store.db");
    let in_store_store = SqliteStore::open(
        &in_store_db,
        SqliteOptions::default(),
        StoreOptions {
            clock: clock.store_clock(),
            ..StoreOptions::default()
        },
    )
    .map_err(|e| {
        Failure::input(format!(
            "cannot open store sqlite:{}: {e}",
            in_store_db.display()
        ))
    })?;
    let (lock, idem, in_store, analysis) = rt
        .block_on(async {
            let lock = simulate(&scenario, &Guard::LockOnly, &clock).await?;
            let store = Store::from(store);
            let guard = Guard::Idem {
                policy: policy.clone(),
                store: store.clone(),
            };
            let idem = simulate(&scenario, &guard, &clock).await?;
            let guard = Guard::InStore {
                policy,
                store: Store::from(in_store_store),
            };
            let in_store = simulate(&scenario, &guard, &clock).await?;
            // Why the job ran twice, from the attempt log it left.
            let log = store.records().attempts(AttemptFilter::default()).await?;
            Ok::<_, idem_sim::SimError>((lock, idem, in_store, forensics::analyse(&log)))
        })
        .map_err(|e| Failure::input(format!("the simulation failed: {e}")))?;

    if args.json {
        let out = json!({
            "seed": args.seed,
            "customers": args.customers,
            "lock_only": {
                "charges": lock.counters.charges,
                "duplicate_charges": lock.counters.duplicate_charges,
                "lock_busy": lock.counters.lock_busy,
                "lock_lost": lock.counters.lock_lost,
            },
            "idem": {
                "charges": idem.counters.charges,
                "duplicate_charges": idem.counters.duplicate_charges,
                "fenced_writes": idem.counters.fenced_writes,
                "replays": idem.counters.replays,
                "outcome_unknown": idem.counters.outcome_unknown,
                "causes": analysis.causes().iter().map(|(c, n)| json!({"cause": c, "count": n})).collect::<Vec<_>>(),
            },
            "in_store": {
                "charges": in_store.counters.charges,
                "duplicate_charges": in_store.counters.duplicate_charges,
                "fenced_writes": in_store.counters.fenced_writes,
                "replays": in_store.counters.replays,
                "outcome_unknown": in_store.counters.outcome_unknown,
            },
        });
        println!("{out}");
    } else {
        print_table(&scenario, &lock, &idem, &in_store);
        for line in analysis.summary_lines() {
            println!("why: {line}");
        }
    }
    Ok(SUCCESS)
}

fn minutes(ms: u64) -> String {
    let s = ms / 1000;
    format!("{}m{:02}s", s / 60, s % 60)
}

fn print_table(scenario: &Scenario, lock: &Report, idem: &Report, in_store: &Report) {
    let (invoice, pause) = scenario.runs[0]
        .faults
        .iter()
        .find_map(|f| match f {
            Fault::Pause { invoice, ms, .. } => Some((*invoice, *ms)),
            _ => None,
        })
        .unwrap_or((0, 0));
    let job = &scenario.job;
    println!(
        "nightly billing, {} customers, seed {}, on the embedded store (SQLite), simulated time",
        job.customers, scenario.seed
    );
    println!(
        "the nightly run pauses {} before charging {} (lease {}); the scheduler's retry starts at +{}\n",
        minutes(pause),
        job.customer(invoice),
        minutes(idem_sim::LEASE_MS),
        minutes(scenario.runs[1].start_ms)
    );
    let (l, i, s) = (&lock.counters, &idem.counters, &in_store.counters);
    let row = |name: &str, l: &dyn std::fmt::Display, i: u64, s: u64| {
        println!("{name:<22}{l:>11}{i:>8}{s:>10}");
    };
    println!(
        "{:<22}{:>11}{:>8}{:>10}",
        "", "lock only", "idem", "in store"
    );
    row("charges made", &l.charges, i.charges, s.charges);
    row(
        "duplicate charges",
        &l.duplicate_charges,
        i.duplicate_charges,
        s.duplicate_charges,
    );
    row("fenced writes", &"-", i.fenced_writes, s.fenced_writes);
    row("replays", &"-", i.replays, s.replays);
    row("sent to review", &"-", i.outcome_unknown, s.outcome_unknown);
    println!();
    let twice: Vec<&str> = lock
        .invoices
        .iter()
        .filter(|v| v.charges > 1)
        .map(|v| v.customer.as_str())
        .collect();
    println!(
        "lock only: the paused run's lease expired, the retry took the lock and charged; the paused run woke up still believing it held the lock and charged {} again.",
        if twice.is_empty() {
            "nobody".to_string()
        } else {
            twice.join(", ")
        }
    );
    println!(
        "idem: each charge is claimed under its key (customer, period, invoice) with a fence; the retry sent the expired claim to review instead of charging, and the late completion was fenced."
    );
    println!(
        "in store: each charge is a row written in the store's own transaction and committed with its completion; the retry knew the expired claim had charged nothing and charged it, and the paused run's transaction was fenced and rolled back."
    );
}
