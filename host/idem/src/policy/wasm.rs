//! The wasmtime engine, configured for deterministic, bounded evaluation.
//!
//! Named `wasm`, not `engine`: in idem "the engine" is the exactly-once
//! [`crate::engine::Engine`]; this module only sets up wasmtime's compiler,
//! instance pool and epoch ticker for the policy runtime.

use std::time::Duration;

use wasmtime::{Config, Enabled, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

use super::config::RuntimeConfig;
use super::error::LoadError;

/// How often the epoch advances: the granularity of the wall-clock deadline.
pub(crate) const EPOCH_TICK: Duration = Duration::from_millis(5);

/// Bytes of a slot's memory zeroed in place on reuse instead of decommitted.
const KEEP_RESIDENT: usize = 1 << 20;
/// Core instances one policy may have: a Rust or JavaScript policy has one,
/// a Python policy 38.
const MAX_CORE_INSTANCES: u32 = 64;
/// Linear memories one policy may have: a Rust policy has one, a
/// StarlingMonkey (componentize-js) or Python policy two, a QuickJS
/// (componentize-qjs) policy three: its runtime's, and an empty one in each
/// of the two small components standing in for the build-time module loader
/// and for WASI. Each is bounded by the memory limit on its own. Not part of
/// the engine's compatibility hash: artifacts compiled before stay valid.
const MAX_MEMORIES: u32 = 3;
/// Slots decommitted together (one TLB flush for many instances).
const DECOMMIT_BATCH: usize = 16;

/// Builds the engine. Every compiler and feature choice here is part of the
/// compiled artifact's compatibility hash, so cached artifacts follow a
/// change automatically; the pool's limits are not (they are checked when
/// a component is loaded).
pub(crate) fn build_engine(config: &RuntimeConfig) -> Result<Engine, LoadError> {
    let mut c = Config::new();
    c.wasm_component_model(true);
    // Determinism: the same policy and input give the same answer on every
    // machine. NaNs are canonicalised, relaxed SIMD is off (its results vary
    // by CPU), and threads are not even compiled in (wasmtime's `threads`
    // feature is off).
    c.cranelift_nan_canonicalization(true);
    c.wasm_relaxed_simd(false);
    // Fuel is the deterministic limit; the epoch is the wall-clock backstop.
    c.consume_fuel(true);
    c.epoch_interruption(true);
    c.max_wasm_stack(512 << 10);
    c.parallel_compilation(true);

    // A fresh instance per evaluation is cheap with a pool: slots are reused
    // and reset, not mapped anew.
    // At most `max_concurrent_evaluations` instances are live (the runtime's
    // slots admit no more); a finished instance's memory may still wait in
    // the decommit queue, so the pool has room for a full batch of those
    // beside the live ones, and an admitted evaluation always instantiates.
    let n = config.max_concurrent_evaluations.max(1) + DECOMMIT_BATCH as u32;
    let mut pool = PoolingAllocationConfig::new();
    // A Python policy (componentize-py) links CPython from 38 core modules,
    // each a core instance; their VM contexts are allocated per instance,
    // so a generous count costs nothing until used.
    pool.total_component_instances(n)
        .total_core_instances(n * MAX_CORE_INSTANCES)
        .total_memories(n * MAX_MEMORIES)
        .total_tables(n * 4)
        .max_core_instances_per_component(MAX_CORE_INSTANCES)
        .max_memories_per_component(MAX_MEMORIES)
        .max_tables_per_component(4)
        .max_memory_size(config.limits.memory_bytes)
        .table_elements(config.limits.table_elements)
        // Resetting a slot by madvise makes the kernel flush TLBs on every
        // core the process ran on; for the few hundred KiB a policy touches,
        // resetting in place is cheaper. With PAGEMAP_SCAN (Linux 6.7+) only
        // the pages the instance dirtied are reset; the rest is decommitted
        // in batches.
        .linear_memory_keep_resident(KEEP_RESIDENT)
        .table_keep_resident(KEEP_RESIDENT)
        .pagemap_scan(Enabled::Auto)
        .decommit_batch_size(DECOMMIT_BATCH);
    c.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    Engine::new(&c).map_err(|e| LoadError::Runtime(format!("{e:#}")))
}

/// Advances the engine's epoch until the engine is dropped, so a runaway
/// evaluation is interrupted by its deadline.
pub(crate) fn start_epoch_ticker(engine: &Engine) {
    let weak = engine.weak();
    std::thread::Builder::new()
        .name("idem-epoch".into())
        .spawn(move || {
            while let Some(engine) = weak.upgrade() {
                engine.increment_epoch();
                drop(engine);
                std::thread::sleep(EPOCH_TICK);
            }
        })
        .expect("spawning a thread succeeds");
}

/// Epoch ticks for a deadline, at least one.
pub(crate) fn deadline_ticks(deadline: Duration) -> u64 {
    (deadline.as_millis() / EPOCH_TICK.as_millis()).max(1) as u64 + 1
}
