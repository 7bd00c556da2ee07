//! Namespace ownership at the engine: a policy claims in its namespace only
//! when the store registered its digest there (`idem policy activate`).
//! A foreign or tampered component is refused before anything is written,
//! naming the digest it has and the ones the namespace accepts.
//!
//! A namespace nobody registered is open (as before registries existed)
//! unless the store requires registration. Registrations only ever add
//! digests, so an accepted digest is remembered for the engine's life; an
//! open namespace is looked at again after [`OPEN_RECHECK`], so that a
//! registration made while a service runs is enforced without a restart.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use idem_store::{Registration, Store, StoreError};

use super::EngineError;
use super::dual_read::DualRead;
pub use super::error::Unregistered;
use crate::policy::LoadedPolicy;

/// How long an open (unregistered, not required) namespace is taken as
/// open before the store is asked again.
pub const OPEN_RECHECK: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, Copy)]
enum Verdict {
    Accepted,
    OpenUntil(Instant),
}

/// The engine's memory of whether its policy may claim, and of the
/// store's dual-read window for it.
#[derive(Debug, Default)]
pub(super) struct Admission {
    verdict: Mutex<Option<Verdict>>,
    dual_read: Mutex<Option<Arc<DualRead>>>,
}

impl Admission {
    /// `Ok` when `policy` may claim in its namespace in `store`.
    pub(super) async fn check(
        &self,
        store: &Store,
        policy: &LoadedPolicy,
    ) -> Result<(), EngineError> {
        let remembered = *self.verdict.lock().unwrap_or_else(|p| p.into_inner());
        match remembered {
            Some(Verdict::Accepted) => return Ok(()),
            Some(Verdict::OpenUntil(until)) if Instant::now() < until => return Ok(()),
            _ => {}
        }
        let namespace = &policy.info().namespace;
        let digest = policy.digest();
        let verdict = match store.registry().registration(namespace).await? {
            Some(r) if r.accepts(digest) => {
                self.load_dual_read(store, policy, &r).await?;
                Verdict::Accepted
            }
            Some(r) => {
                return Err(EngineError::Unregistered(Box::new(Unregistered {
                    namespace: namespace.clone(),
                    found: digest.to_string(),
                    accepted: r.registered,
                })));
            }
            None if store.registry().requires_registration().await? => {
                return Err(EngineError::Unregistered(Box::new(Unregistered {
                    namespace: namespace.clone(),
                    found: digest.to_string(),
                    accepted: Vec::new(),
                })));
            }
            None => Verdict::OpenUntil(Instant::now() + OPEN_RECHECK),
        };
        *self.verdict.lock().unwrap_or_else(|p| p.into_inner()) = Some(verdict);
        Ok(())
    }

    /// The store's dual-read window for this policy, when one was loaded.
    pub(super) fn dual_read(&self) -> Option<Arc<DualRead>> {
        self.dual_read
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// When `policy` is the active version and the registration keeps a
    /// dual-read window open, loads the replaced version from the component
    /// the store kept.
    async fn load_dual_read(
        &self,
        store: &Store,
        policy: &LoadedPolicy,
        registration: &Registration,
    ) -> Result<(), EngineError> {
        let Some(window) = registration.dual_read_at(store.clock().now_ms()) else {
            return Ok(());
        };
        if registration.active != policy.digest() || window.previous == policy.digest() {
            return Ok(());
        }
        let Some(bytes) = store.registry().policy_component(&window.previous).await? else {
            return Ok(());
        };
        let previous = policy.load_sibling(&bytes).map_err(|e| {
            EngineError::Store(StoreError::InvalidRequest(format!(
                "the replaced version {} the dual-read window names does not load: {e}",
                window.previous
            )))
        })?;
        *self.dual_read.lock().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(DualRead {
            previous,
            until_ms: window.until_ms,
        }));
        Ok(())
    }
}
