//! Policies in JavaScript and Python against the Rust one, side by side in
//! one run: a derive on a fresh instance (p50, p99, the CPU time and page
//! faults it takes, and the p50 of the fresh instance alone), compiling, and
//! a load from the artifact cache. The JavaScript
//! (StarlingMonkey and QuickJS: `js`, `js-quickjs`) and Python ports of
//! billing-charge are built as `idem build` builds them
//! ([`ports`]: the toolchains installed on first use, a build kept per
//! state of the sources).
//!
//! `cargo bench -p idem-tests --bench languages [-- SECTION...]`, sections
//! `derive` and `load` (both by default); `profile-js`, `profile-js-quickjs` and `profile-python`
//! (only when named) derive with that policy for 30 s, for a profiler to
//! attach to once they say so.

use std::hint::black_box;
use std::time::{Duration, Instant};

use idem::core::{Operation, OperationLimits};
use idem::policy::{LoadedPolicy, PolicyRuntime, RuntimeConfig};
use idem_tests::{policy_bytes, ports};

const OP: &str = r#"{"kind":"charge","tenant":"acme","fields":{"customer":"c1","billing_period":"2026-11","invoice_id":"i1","amount":"100","currency":"EUR"}}"#;

/// The billing-charge policies: Rust (built by the tests' build script),
/// JavaScript with each engine and Python (built here).
fn components(quick: bool) -> Vec<(&'static str, Vec<u8>)> {
    let mut all = vec![("rust", policy_bytes("billing-charge"))];
    if quick {
        return all;
    }
    for lang in ports::PORTS {
        let component = ports::component(lang, "billing-charge");
        all.push((lang, std::fs::read(component).unwrap()));
    }
    all
}

/// Minor page faults of this process so far (field 10 of /proc/self/stat).
fn minor_faults() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The command name, in parentheses, may hold spaces: count after it.
    stat.rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().nth(7))
        .and_then(|f| f.parse().ok())
        .unwrap_or(0)
}

/// This thread's time on a CPU so far, in ns: what a derive costs whatever
/// the other processes on the machine take, where the wall clock counts
/// them. The thread's CPU clock, exact to the call (/proc's schedstat and
/// stat move only at scheduler ticks).
fn cpu_ns() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid timespec for the call to write.
    let ok = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) } == 0;
    if !ok {
        return 0;
    }
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// What `n` runs of `f` took, after `warm` unmeasured ones.
struct Timed {
    p50: Duration,
    p99: Duration,
    /// CPU time of one run, on average.
    cpu: Duration,
    /// Minor page faults of one run, on average.
    faults: f64,
}

fn timed(warm: u32, n: u32, mut f: impl FnMut()) -> Timed {
    for _ in 0..warm {
        f();
    }
    let faults = minor_faults();
    let cpu = cpu_ns();
    let mut times: Vec<Duration> = (0..n)
        .map(|_| {
            let started = Instant::now();
            f();
            started.elapsed()
        })
        .collect();
    let cpu = Duration::from_nanos((cpu_ns() - cpu) / u64::from(n));
    let faults = (minor_faults() - faults) as f64 / f64::from(n);
    times.sort();
    let at = |q: f64| times[((times.len() - 1) as f64 * q) as usize];
    Timed {
        p50: at(0.5),
        p99: at(0.99),
        cpu,
        faults,
    }
}

fn main() {
    // `cargo test --benches` runs benches once in test mode: Rust only, short.
    let quick = std::env::args().any(|a| a == "--test" || a == "--list");
    let chosen: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let wants = |section: &str| chosen.is_empty() || chosen.iter().any(|c| c == section);
    let mut op = Operation::from_json(OP, &OperationLimits::default()).unwrap();
    op.now_ms = Some(0);
    let runtime = PolicyRuntime::new(RuntimeConfig {
        cache_dir: Some(ports::cache_dir()),
        ..RuntimeConfig::default()
    })
    .unwrap();
    let all = components(quick);
    let (warm, n) = if quick { (1, 10) } else { (200, 2_000) };

    let policies: Vec<(&str, LoadedPolicy)> = all
        .iter()
        .map(|(lang, bytes)| (*lang, runtime.load_bytes(bytes).unwrap()))
        .collect();

    if wants("derive") {
        println!(
            "a derive on a fresh instance ({n} each, after {warm} unmeasured), and the fresh instance alone"
        );
        println!(
            "{:>10} {:>10} {:>10} {:>10} {:>14} {:>10} {:>12} {:>12}",
            "policy",
            "p50",
            "p99",
            "cpu/derive",
            "faults/derive",
            "fuel",
            "÷ rust p50",
            "instance p50"
        );
        let mut rust_p50 = None;
        for (lang, policy) in &policies {
            let derive = timed(warm, n, || {
                black_box(policy.derive(black_box(&op), 0).unwrap());
            });
            let instance = timed(warm, n, || policy.instantiate_only().unwrap());
            let fuel = policy.derive(&op, 0).unwrap().fuel_used;
            let base = *rust_p50.get_or_insert(derive.p50);
            println!(
                "{lang:>10} {:>10.1?} {:>10.1?} {:>10.1?} {:>14.1} {fuel:>10} {:>11.1}x {:>12.1?}",
                derive.p50,
                derive.p99,
                derive.cpu,
                derive.faults,
                derive.p50.as_secs_f64() / base.as_secs_f64(),
                instance.p50,
            );
        }
    }
    for (lang, policy) in &policies {
        if chosen.iter().any(|c| *c == format!("profile-{lang}")) {
            eprintln!(
                "profile-{lang}: deriving for 30 s (pid {})",
                std::process::id()
            );
            let started = Instant::now();
            let mut count = 0u64;
            while started.elapsed() < Duration::from_secs(30) {
                black_box(policy.derive(&op, 0).unwrap());
                count += 1;
            }
            println!("profile-{lang}: {count} derives in 30 s");
        }
    }
    if wants("load") {
        println!("loading: compiling (first load), and from the artifact cache (median of 5)");
        println!(
            "{:>10} {:>10} {:>10} {:>10}",
            "policy", "MB", "compile", "cached"
        );
        for (lang, bytes) in &all {
            let compiling = PolicyRuntime::new(RuntimeConfig {
                cache_dir: None,
                ..RuntimeConfig::default()
            })
            .unwrap();
            let started = Instant::now();
            black_box(compiling.load_bytes(bytes).unwrap());
            let compiled = started.elapsed();
            let mut cached: Vec<Duration> = (0..if quick { 1 } else { 5 })
                .map(|_| {
                    // A new runtime each time: what a new process pays.
                    let fresh = PolicyRuntime::new(RuntimeConfig {
                        cache_dir: Some(ports::cache_dir()),
                        ..RuntimeConfig::default()
                    })
                    .unwrap();
                    let started = Instant::now();
                    black_box(fresh.load_bytes(bytes).unwrap());
                    started.elapsed()
                })
                .collect();
            cached.sort();
            println!(
                "{lang:>10} {:>10.2} {:>10.2?} {:>10.2?}",
                bytes.len() as f64 / 1e6,
                compiled,
                cached[cached.len() / 2]
            );
        }
    }
}
