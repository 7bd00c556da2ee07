//! Policy runtime costs, and their ratios measured in the same run:
//! native derivation (the floor) vs a fresh sandboxed instance per call, and
//! compiling a policy vs loading its cached compilation.
//!
//! `cargo bench -p idem-tests --bench policy`

use std::hint::black_box;
use std::time::{Duration, Instant};

use billing_charge::BillingCharge;
use criterion::{Criterion, criterion_group, criterion_main};
use idem::core::{Operation, OperationLimits};
use idem::policy::{PolicyRuntime, RuntimeConfig};
use idem_policy::testing::derive_native;
use idem_tests::policy_bytes;

const SEED_OP: &str = r#"{"kind":"charge","tenant":"acme","fields":{"customer":"c1","billing_period":"2026-11","invoice_id":"i1","amount":"100","currency":"EUR"},"run":{"run_id":"nightly-2026-11-30","trigger":"scheduled","attempt":1}}"#;

fn seed_op() -> Operation {
    let mut op = Operation::from_json(SEED_OP, &OperationLimits::default()).unwrap();
    op.now_ms = Some(0);
    op
}

fn no_cache() -> PolicyRuntime {
    PolicyRuntime::new(RuntimeConfig {
        cache_dir: None,
        ..Default::default()
    })
    .unwrap()
}

fn derive(c: &mut Criterion) {
    let op = seed_op();
    let policy = no_cache()
        .load_bytes(&policy_bytes("billing-charge"))
        .unwrap();
    let mut g = c.benchmark_group("derive");
    g.bench_function("native", |b| {
        b.iter(|| derive_native::<BillingCharge>(black_box(&op)).unwrap())
    });
    g.bench_function("wasm fresh instance", |b| {
        b.iter(|| policy.derive(black_box(&op), 0).unwrap())
    });
    g.finish();
}

fn load(c: &mut Criterion) {
    let bytes = policy_bytes("billing-charge");
    let dir = tempfile::tempdir().unwrap();
    let cached = PolicyRuntime::new(RuntimeConfig {
        cache_dir: Some(dir.path().into()),
        ..Default::default()
    })
    .unwrap();
    cached.load_bytes(&bytes).unwrap();
    let compiling = no_cache();
    let mut g = c.benchmark_group("load");
    g.sample_size(20);
    g.bench_function("compile", |b| {
        b.iter(|| compiling.load_bytes(black_box(&bytes)).unwrap())
    });
    g.bench_function("cached", |b| {
        b.iter(|| cached.load_bytes(black_box(&bytes)).unwrap())
    });
    g.finish();
}

/// Median time per call of `f` over `batches` batches of `per_batch` calls.
fn median_per_call(batches: usize, per_batch: u32, mut f: impl FnMut()) -> Duration {
    let mut times: Vec<Duration> = (0..batches)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..per_batch {
                f();
            }
            start.elapsed() / per_batch
        })
        .collect();
    times.sort();
    times[times.len() / 2]
}

/// The ratios `docs/benchmarks.md` reports, measured side by side in one
/// run.
fn ratios(_c: &mut Criterion) {
    let op = seed_op();
    let bytes = policy_bytes("billing-charge");
    let runtime = no_cache();
    let policy = runtime.load_bytes(&bytes).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cached = PolicyRuntime::new(RuntimeConfig {
        cache_dir: Some(dir.path().into()),
        ..Default::default()
    })
    .unwrap();
    cached.load_bytes(&bytes).unwrap();

    let native = median_per_call(21, 20_000, || {
        black_box(derive_native::<BillingCharge>(black_box(&op)).unwrap());
    });
    let wasm = median_per_call(21, 2_000, || {
        black_box(policy.derive(black_box(&op), 0).unwrap());
    });
    let compile = median_per_call(7, 3, || {
        black_box(runtime.load_bytes(black_box(&bytes)).unwrap());
    });
    let load = median_per_call(21, 100, || {
        black_box(cached.load_bytes(black_box(&bytes)).unwrap());
    });
    println!("ratios (medians, one run):");
    println!("  native derive            {:>10.2?}", native);
    println!(
        "  wasm derive, fresh inst. {:>10.2?}  = {:.1}x native",
        wasm,
        wasm.as_secs_f64() / native.as_secs_f64()
    );
    println!("  compile + load           {:>10.2?}", compile);
    println!(
        "  cached load              {:>10.2?}  = 1/{:.0} of compile",
        load,
        compile.as_secs_f64() / load.as_secs_f64()
    );
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(3));
    targets = derive, load, ratios
}
criterion_main!(benches);
