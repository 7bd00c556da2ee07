//! The policy runtime: loads policy components and evaluates them in a
//! sandbox. It knows nothing of storage; the engine composes it with a store.
//!
//! - [`PolicyRuntime`] owns the wasmtime engine (deterministic, fuel-metered,
//!   epoch-interrupted, pooled instances) and the compiled-artifact cache.
//! - [`LoadedPolicy`] is one checked policy, identified by `sha256:<hex>` of
//!   its bytes. Every evaluation gets a fresh store and instance, so nothing
//!   leaks between operations, and a trap kills only that evaluation.

mod cache;
mod config;
mod convert;
mod diagnostics;
mod error;
mod inspect;
mod limiter;
mod memo;
pub mod sections;
mod slots;
mod wasm;

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use idem_core::{
    Decision, Derivation, Digest, DuplicateContext, KeyedDerivation, Operation, PolicyError,
    PolicyInfo, check_decision,
};
use wasmtime::component::{Component, Linker};
use wasmtime::{Engine, Store, Trap};

pub use cache::{CachePruned, prune_cache};
pub use config::{DEFAULT_CACHE_MAX_BYTES, Limits, RuntimeConfig, default_cache_dir};
pub use diagnostics::MAX_SAID_BYTES;
pub use error::{EvalError, LoadError};
pub use inspect::POLICY_INTERFACE;
pub use memo::MemoStats;

use cache::ArtifactCache;
use convert::wit::IdempotencyPolicyPre;
use limiter::{EvalState, MemoryLimitExceeded};

/// The result of one evaluation, with what it cost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Evaluated<T> {
    /// What the policy returned.
    pub value: T,
    /// Fuel consumed by the call.
    pub fuel_used: u64,
    /// Largest linear memory the instance reached, in bytes.
    pub memory_peak: usize,
}

// Exhaustive on purpose (not `#[non_exhaustive]`): the machine code is compiled on this load or
// read from the cache.
/// Where a loaded policy's machine code came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CodeSource {
    /// Compiled from the component's bytes on this load (no cache, a miss,
    /// or an unusable artifact).
    Compiled,
    /// Loaded from the on-disk cache of compiled artifacts.
    Cache,
}

/// Loads and evaluates policies. Cheap to share (`Clone` is an `Arc`).
#[derive(Clone)]
pub struct PolicyRuntime {
    inner: Arc<RuntimeInner>,
}

struct RuntimeInner {
    /// wasmtime's engine (compiler and instance pool), built by [`wasm`];
    /// not to be confused with idem's exactly-once [`crate::engine::Engine`].
    wasm_engine: Engine,
    limits: Limits,
    cache: Option<ArtifactCache>,
    slots: slots::Slots,
}

impl PolicyRuntime {
    /// A runtime with these settings.
    pub fn new(config: RuntimeConfig) -> Result<Self, LoadError> {
        let wasm_engine = wasm::build_engine(&config)?;
        wasm::start_epoch_ticker(&wasm_engine);
        let cache = config
            .cache_dir
            .as_deref()
            .map(|dir| ArtifactCache::new(dir, &wasm_engine, config.cache_max_bytes));
        Ok(PolicyRuntime {
            inner: Arc::new(RuntimeInner {
                wasm_engine,
                limits: config.limits,
                cache,
                slots: slots::Slots::new(config.max_concurrent_evaluations),
            }),
        })
    }

    /// The limits every evaluation runs under.
    pub fn limits(&self) -> &Limits {
        &self.inner.limits
    }

    /// Loads a policy component from a file.
    pub fn load_file(&self, path: &Path) -> Result<LoadedPolicy, LoadError> {
        let bytes = std::fs::read(path).map_err(|source| LoadError::Read {
            path: path.display().to_string(),
            source,
        })?;
        self.load_bytes(&bytes)
    }

    /// Loads a policy component from its bytes: checks what it is, compiles
    /// it (or loads the cached compilation), refuses any import and any world
    /// but the policy's, and asks it to describe itself.
    pub fn load_bytes(&self, bytes: &[u8]) -> Result<LoadedPolicy, LoadError> {
        let inner = &self.inner;
        if bytes.len() > inner.limits.max_component_bytes {
            return Err(LoadError::TooLarge {
                size: bytes.len(),
                limit: inner.limits.max_component_bytes,
            });
        }
        inspect::classify(bytes)?;
        let sections = Arc::new(sections::read(bytes)?);
        let digest = Digest::of_bytes(bytes);
        let lookup = inner
            .cache
            .as_ref()
            .map(|c| c.load(&inner.wasm_engine, &digest.to_hex()));
        let mut cache_warning = None;
        let cached = match lookup {
            Some(cache::Lookup::Hit(c)) => Some(c),
            Some(cache::Lookup::Refused(why)) => {
                tracing::warn!("not using the compiled-policy cache: {why}");
                cache_warning = Some(format!(
                    "not using the compiled-policy cache, compiling instead: {why}"
                ));
                None
            }
            Some(cache::Lookup::Miss) | None => None,
        };
        let (component, source) = match cached {
            Some(c) => (c, CodeSource::Cache),
            None => {
                let c = Component::new(&inner.wasm_engine, bytes)
                    .map_err(|e| LoadError::Invalid(format!("{e:#}")))?;
                (c, CodeSource::Compiled)
            }
        };
        inspect::check_world(&inner.wasm_engine, &component)?;
        if source == CodeSource::Compiled
            && let Some(cache) = &inner.cache
        {
            cache.store(&digest.to_hex(), &component);
        }
        let mut linker: Linker<EvalState> = Linker::new(&inner.wasm_engine);
        diagnostics::add_to_linker(&mut linker)?;
        let pre = linker
            .instantiate_pre(&component)
            .map_err(|e| LoadError::Instantiate(format!("{e:#}")))?;
        let pre =
            IdempotencyPolicyPre::new(pre).map_err(|e| LoadError::Instantiate(format!("{e:#}")))?;
        let mut policy = LoadedPolicy {
            runtime: self.clone(),
            pre,
            digest: format!("sha256:{}", digest.to_hex()),
            size: bytes.len(),
            source,
            cache_warning,
            info: PolicyInfo {
                name: String::new(),
                version: String::new(),
                namespace: String::new(),
                description: String::new(),
            },
            memo: None,
            sections,
        };
        let info = policy.call(0, |bindings, store| {
            bindings
                .idem_policy_policy()
                .call_describe(store)
                .map(convert::info)
        });
        policy.info = info.map_err(|e| LoadError::Describe(Box::new(e)))?.value;
        policy
            .info
            .validate()
            .map_err(|e| LoadError::BadDescription(e.to_string()))?;
        Ok(policy)
    }
}

/// A loaded, checked policy.
#[derive(Clone)]
pub struct LoadedPolicy {
    runtime: PolicyRuntime,
    pre: IdempotencyPolicyPre<EvalState>,
    digest: String,
    size: usize,
    source: CodeSource,
    cache_warning: Option<String>,
    info: PolicyInfo,
    /// Remembered evaluations, shared by the clones of a memoized policy.
    memo: Option<Arc<memo::Memo>>,
    /// The lifecycle manifest and golden vectors the component carries.
    sections: Arc<sections::Sections>,
}

impl std::fmt::Debug for LoadedPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedPolicy")
            .field("digest", &self.digest)
            .field("info", &self.info)
            .finish()
    }
}

impl LoadedPolicy {
    /// `sha256:<64 hex>` of the component's bytes: the policy's identity.
    pub fn digest(&self) -> &str {
        &self.digest
    }

    /// What the policy says it is (validated at load).
    pub fn info(&self) -> &PolicyInfo {
        &self.info
    }

    /// The lifecycle manifest the component carries (the defaults when
    /// it carries none): see [`idem_core::lifecycle`].
    pub fn lifecycle(&self) -> &idem_core::Lifecycle {
        &self.sections.lifecycle
    }

    /// Whether records may keep this policy's canonical operations (its
    /// manifest's `keep-operations`, default yes).
    pub fn keeps_operations(&self) -> bool {
        self.sections.lifecycle.keep_operations
    }

    /// The golden vectors the component carries (a cases file's text),
    /// when it carries them.
    pub fn golden_cases(&self) -> Option<&str> {
        self.sections.cases.as_deref()
    }

    /// Loads another component into this policy's runtime (same limits,
    /// same cache): e.g. the replaced version a store kept.
    pub fn load_sibling(&self, bytes: &[u8]) -> Result<LoadedPolicy, LoadError> {
        self.runtime.load_bytes(bytes)
    }

    /// The component's size in bytes.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Whether this load compiled the policy or used the cache.
    pub fn code_source(&self) -> CodeSource {
        self.source
    }

    /// Why this load did not use the compiled-policy cache when one was
    /// configured and refused (a directory or artifact another user could
    /// write): a warning for the user, since the policy still loaded.
    pub fn cache_warning(&self) -> Option<&str> {
        self.cache_warning.as_deref()
    }

    /// The limits evaluations run under.
    pub fn limits(&self) -> &Limits {
        self.runtime.limits()
    }

    /// This policy remembering up to `capacity` successful evaluations of
    /// each kind (derive, on-duplicate), shared by its clones: the same
    /// input is answered from memory instead of a fresh instance. Sound
    /// because a policy is a pure function of its input (no imports,
    /// canonical NaNs, deterministic fuel); the answer, fuel and memory peak
    /// are the ones the first evaluation reported. For hosts that evaluate
    /// the same inputs again and again: a simulation replaying one schedule
    /// on several stores, a reconciliation loop. When full, the memo starts
    /// over.
    pub fn memoized(&self, capacity: usize) -> LoadedPolicy {
        LoadedPolicy {
            memo: Some(Arc::new(memo::Memo::new(capacity))),
            ..self.clone()
        }
    }

    /// How often the memo answered (`None`: not [`memoized`](Self::memoized)).
    pub fn memo_stats(&self) -> Option<MemoStats> {
        self.memo.as_ref().map(|m| m.stats())
    }

    /// Derives the key and fingerprint for an operation. `now_ms` is the
    /// logical time handed to the policy when the operation has none. The
    /// outer `Err` is a failure to evaluate (trap, limit, malformed output);
    /// the inner one is the policy's own typed refusal.
    pub fn derive(
        &self,
        op: &Operation,
        now_ms: u64,
    ) -> Result<Evaluated<Result<KeyedDerivation, PolicyError>>, EvalError> {
        let raw = self.derive_raw(op, now_ms)?;
        let value = match raw.value {
            Ok(d) => Ok(d.finish(&self.info.namespace)?),
            Err(e) => Err(e),
        };
        Ok(Evaluated {
            value,
            fuel_used: raw.fuel_used,
            memory_peak: raw.memory_peak,
        })
    }

    /// The derivation exactly as the policy returned it, unchecked.
    pub fn derive_raw(
        &self,
        op: &Operation,
        now_ms: u64,
    ) -> Result<Evaluated<Result<Derivation, PolicyError>>, EvalError> {
        let input = convert::operation(op, now_ms);
        // Operations read from JSON were bounded by the reader; one built in
        // code is bounded here.
        let size = op.material_bytes();
        let limit = self.runtime.limits().operation.max_bytes;
        if size > limit {
            return Err(EvalError::Operation(idem_core::OpError::TooLarge {
                size,
                limit,
            }));
        }
        if let Some(hit) = self.memo.as_ref().and_then(|m| m.derived(&input)) {
            return Ok(hit);
        }
        let evaluated = self.call(self.runtime.limits().fuel, |bindings, store| {
            bindings
                .idem_policy_policy()
                .call_derive(store, &input)
                .map(|r| r.map(convert::derivation).map_err(convert::policy_error))
        })?;
        if let Some(memo) = &self.memo {
            memo.remember_derived(input, &evaluated);
        }
        Ok(evaluated)
    }

    /// What a duplicate gets, after the host's safety gate: an unsafe
    /// decision is an [`EvalError::Unsafe`] (the caller rejects the
    /// duplicate: fail closed).
    pub fn on_duplicate(
        &self,
        ctx: &DuplicateContext,
        now_ms: u64,
    ) -> Result<Evaluated<Decision>, EvalError> {
        let decided = self.on_duplicate_unchecked(ctx, now_ms)?;
        check_decision(ctx, &decided.value)?;
        Ok(decided)
    }

    /// The policy's decision as it returned it, before the safety gate.
    pub fn on_duplicate_unchecked(
        &self,
        ctx: &DuplicateContext,
        now_ms: u64,
    ) -> Result<Evaluated<Decision>, EvalError> {
        let input = convert::duplicate_context(ctx, now_ms);
        if let Some(hit) = self.memo.as_ref().and_then(|m| m.decided(&input)) {
            return Ok(hit);
        }
        let evaluated = self.call(self.runtime.limits().fuel, |bindings, store| {
            bindings
                .idem_policy_policy()
                .call_on_duplicate(store, &input)
                .map(convert::decision)
        })?;
        if let Some(memo) = &self.memo {
            memo.remember_decided(input, &evaluated);
        }
        Ok(evaluated)
    }

    /// A fresh store and instance of this policy, dropped without a call:
    /// the part of every evaluation that is not the guest's own work.
    /// For the benches (`--bench languages` sets it against a whole derive).
    #[doc(hidden)]
    pub fn instantiate_only(&self) -> Result<(), EvalError> {
        self.call(self.runtime.limits().fuel, |_, _| Ok(()))
            .map(|_| ())
    }

    /// Runs one call in a fresh store and instance, under the limits.
    fn call<T>(
        &self,
        fuel: u64,
        f: impl FnOnce(&convert::wit::IdempotencyPolicy, &mut Store<EvalState>) -> wasmtime::Result<T>,
    ) -> Result<Evaluated<T>, EvalError> {
        let limits = self.runtime.limits();
        // describe() runs at load with the full budget too.
        let fuel = if fuel == 0 { limits.fuel } else { fuel };
        // Declared before the store: the slot is given back after the
        // store (and its instance) has returned it to the pool.
        let _slot = self.runtime.inner.slots.take();
        let mut store = Store::new(
            &self.runtime.inner.wasm_engine,
            EvalState {
                max_memory: limits.memory_bytes,
                max_table_elements: limits.table_elements,
                peak_memory: 0,
                said: None,
            },
        );
        store.limiter(|s| s);
        store
            .set_fuel(fuel)
            .map_err(|e| EvalError::Instantiate(format!("{e:#}")))?;
        store.set_epoch_deadline(wasm::deadline_ticks(limits.deadline));
        let started = Instant::now();
        let bindings = self.pre.instantiate(&mut store).map_err(|e| {
            // A trap or a memory limit is the policy's; anything else (the
            // instance pool, say) is the host's, not a trap.
            if e.downcast_ref::<Trap>().is_some()
                || e.downcast_ref::<MemoryLimitExceeded>().is_some()
            {
                classify_failure(e, limits, started)
            } else {
                EvalError::Instantiate(format!("{e:#}"))
            }
        })?;
        let value = f(&bindings, &mut store).map_err(|e| {
            let failure = classify_failure(e, limits, started);
            // A trap after the policy said why is its own failure, told in
            // its own words; a limit stays the limit, whatever it said.
            match (failure, store.data_mut().said.take()) {
                (EvalError::Trap { message }, Some(said)) => EvalError::Failed {
                    message: said,
                    trap: message,
                },
                (failure, _) => failure,
            }
        })?;
        let remaining = store.get_fuel().unwrap_or(0);
        Ok(Evaluated {
            value,
            fuel_used: fuel - remaining,
            memory_peak: store.data().peak_memory,
        })
    }
}

/// Whether a trap happened deep in a recursion. A Rust policy's stack lives
/// in its linear memory (64 KiB, see idem-guest-build) and grows down from
/// its top: running out of it wraps the stack pointer below zero and traps
/// as an out-of-bounds access, not as wasmtime's own stack overflow (which
/// guards only the native stack). A backtrace filled to wasmtime's frame cap
/// by at most two functions calling each other is that recursion.
fn deep_recursion(e: &wasmtime::Error) -> bool {
    /// wasmtime's default cap on the frames a trap's backtrace records.
    const FRAME_CAP: usize = 20;
    let Some(trace) = e.downcast_ref::<wasmtime::WasmBacktrace>() else {
        return false;
    };
    let frames = trace.frames();
    if frames.len() < FRAME_CAP {
        return false;
    }
    let mut functions: Vec<u32> = frames.iter().map(|f| f.func_index()).collect();
    functions.sort_unstable();
    functions.dedup();
    functions.len() <= 2
}

/// Turns a wasmtime error into the typed reason the evaluation failed.
fn classify_failure(e: wasmtime::Error, limits: &Limits, started: Instant) -> EvalError {
    if let Some(m) = e.downcast_ref::<MemoryLimitExceeded>() {
        return EvalError::MemoryLimit {
            requested: m.requested,
            limit: m.limit,
        };
    }
    match e.downcast_ref::<Trap>() {
        Some(Trap::OutOfFuel) => EvalError::OutOfFuel { limit: limits.fuel },
        Some(Trap::Interrupt) => EvalError::Deadline {
            deadline_ms: limits.deadline.as_millis(),
            elapsed_ms: started
                .elapsed()
                .as_millis()
                .max(limits.deadline.as_millis()),
        },
        Some(Trap::MemoryOutOfBounds) if deep_recursion(&e) => EvalError::Trap {
            message: format!(
                "stack overflow: the policy's stack ran out (unbounded recursion?); wasm trap: {}",
                Trap::MemoryOutOfBounds
            ),
        },
        Some(trap) => EvalError::Trap {
            message: match trap {
                Trap::UnreachableCodeReached => {
                    "wasm `unreachable` executed (a panic in the policy, or a failed allocation)"
                        .to_string()
                }
                Trap::StackOverflow => {
                    "stack overflow: the policy's call stack ran out (unbounded recursion?)"
                        .to_string()
                }
                other => other.to_string(),
            },
        },
        None => EvalError::Trap {
            message: format!("{e:#}"),
        },
    }
}
