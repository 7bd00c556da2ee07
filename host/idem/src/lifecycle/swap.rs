//! Hot swap of a policy inside a running service: validate → precompile →
//! golden vectors → diff → atomic swap, with the previous version kept
//! warm for an instant rollback.
//!
//! [`HotEngine`] holds the current [`Engine`] behind a lock that is taken
//! only to clone an `Arc`: every call ([`HotEngine::begin`], or a caller
//! holding [`HotEngine::engine`]'s snapshot) runs start to end on the
//! version it started with — its derive, the policy's answer to a
//! duplicate and its claim are one version's — while a swap replaces the
//! version later calls get. Nothing waits for a swap, and a swap waits for
//! nothing.

use std::sync::{Arc, RwLock};

use idem_core::Operation;
use idem_store::StoreError;
use thiserror::Error;

use super::diff::{DiffReport, Differ, diff_store};
use super::gate::{GateError, run_golden_vectors};
use crate::engine::{Begin, Engine, EngineError};
use crate::policy::{LoadError, LoadedPolicy};

/// What a candidate version is checked against before it may be swapped in.
#[derive(Debug, Clone, Default)]
pub struct SwapCheck {
    /// Golden vectors shipped beside the component (default: the ones it
    /// carries).
    pub cases: Option<String>,
    /// Operations to diff the versions over (with the store's records
    /// within retention when `diff_store` is on).
    pub corpus: Vec<Operation>,
    /// Also diff over every record the store keeps in the namespace.
    pub diff_store: bool,
    /// Accept a key-changing version (a person decided; say why in your
    /// own log).
    pub allow_key_change: bool,
}

/// Why a candidate was not swapped in.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum SwapError {
    /// It is not a policy this host runs (validation, compilation).
    #[error("the candidate does not load: {0}")]
    Load(#[from] LoadError),
    /// It names another namespace than the current version.
    #[error("the candidate writes into namespace `{found}`, the current version into `{current}`")]
    Namespace {
        /// The current version's namespace.
        current: String,
        /// The candidate's.
        found: String,
    },
    /// It fails its own golden vectors.
    #[error("the candidate is refused: {0}")]
    Gate(#[from] GateError),
    /// It would change keys within retention.
    #[error("the candidate would change {} key(s) within retention", .0.key_changes)]
    KeysChange(Box<DiffReport>),
    /// The store could not be read for the diff.
    #[error("diffing over the store: {0}")]
    Store(#[from] StoreError),
    /// There is no previous version to roll back to.
    #[error("no previous version is kept")]
    NothingToRollBack,
}

/// A candidate that passed every check, compiled and ready.
#[derive(Debug)]
pub struct Prepared {
    policy: LoadedPolicy,
    /// The diff that was made (over the corpus and, if asked, the store).
    pub diff: DiffReport,
}

impl Prepared {
    /// The candidate.
    pub fn policy(&self) -> &LoadedPolicy {
        &self.policy
    }
}

/// An engine whose policy can be swapped while it serves.
pub struct HotEngine {
    current: RwLock<Arc<Engine>>,
    previous: RwLock<Option<Arc<Engine>>>,
}

impl HotEngine {
    /// Serves with `engine` until a swap.
    pub fn new(engine: Engine) -> Self {
        HotEngine {
            current: RwLock::new(Arc::new(engine)),
            previous: RwLock::new(None),
        }
    }

    /// The current version's engine: hold it for a whole evaluation (and
    /// its execution) so that it runs on one version.
    pub fn engine(&self) -> Arc<Engine> {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// [`Engine::begin`] on the current version.
    pub async fn begin(&self, op: &Operation) -> Result<Begin, EngineError> {
        self.engine().begin(op).await
    }

    /// Validates and precompiles `bytes` into the current version's runtime,
    /// runs its golden vectors, and diffs it against the current version
    /// over `check`'s corpus (and the store's records): the steps before a
    /// swap, none of which changes what callers get.
    pub async fn prepare(&self, bytes: &[u8], check: &SwapCheck) -> Result<Prepared, SwapError> {
        let current = self.engine();
        let old = current.policy();
        let policy = old.load_sibling(bytes)?;
        if policy.info().namespace != old.info().namespace {
            return Err(SwapError::Namespace {
                current: old.info().namespace.clone(),
                found: policy.info().namespace.clone(),
            });
        }
        run_golden_vectors(&policy, check.cases.as_deref())?;
        let mut diff = if check.diff_store {
            diff_store(old, &policy, current.store()).await?
        } else {
            Differ::new(old, &policy).finish()
        };
        if !check.corpus.is_empty() {
            let mut differ = Differ::new(old, &policy);
            let now = current.store().clock().now_ms();
            for (i, op) in check.corpus.iter().enumerate() {
                differ.operation(format!("corpus {}", i + 1), op, now);
            }
            let corpus = differ.finish();
            diff.compared += corpus.compared;
            diff.unchanged += corpus.unchanged;
            diff.key_changes += corpus.key_changes;
            diff.groups.extend(corpus.groups);
        }
        if diff.key_changes > 0 && !check.allow_key_change {
            return Err(SwapError::KeysChange(Box::new(diff)));
        }
        Ok(Prepared { policy, diff })
    }

    /// Swaps `prepared` in: later calls get it; calls in flight finish on
    /// the version they started with; the replaced version is kept warm for
    /// [`HotEngine::rollback`]. Returns the replaced engine.
    pub fn swap(&self, prepared: Prepared) -> Arc<Engine> {
        let next = self.engine().with_policy(prepared.policy);
        self.install(Arc::new(next))
    }

    /// Swaps the previous version back in, at once (it is still compiled).
    pub fn rollback(&self) -> Result<Arc<Engine>, SwapError> {
        let previous = self
            .previous
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .ok_or(SwapError::NothingToRollBack)?;
        Ok(self.install(previous))
    }

    fn install(&self, next: Arc<Engine>) -> Arc<Engine> {
        let replaced = std::mem::replace(
            &mut *self.current.write().unwrap_or_else(|p| p.into_inner()),
            next,
        );
        *self.previous.write().unwrap_or_else(|p| p.into_inner()) = Some(replaced.clone());
        replaced
    }
}
