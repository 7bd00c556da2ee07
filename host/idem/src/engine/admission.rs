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

use std::sync::Mutex;
use std::time::{Duration, Instant};

use idem_store::Store;

use super::EngineError;
use crate::policy::LoadedPolicy;

/// How long an open (unregistered, not required) namespace is taken as
/// open before the store is asked again.
pub const OPEN_RECHECK: Duration = Duration::from_secs(10);

/// Why a policy may not claim in its namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unregistered {
    /// The namespace.
    pub namespace: String,
    /// The digest of the policy that tried.
    pub found: String,
    /// The digests the namespace accepts (empty when nobody registered it
    /// and the store requires registration).
    pub accepted: Vec<String>,
}

impl std::fmt::Display for Unregistered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.accepted.is_empty() {
            write!(
                f,
                "policy {} may not claim in namespace `{}`: the store requires a registered policy and none is (register one with `idem policy activate`); nothing was written",
                self.found, self.namespace
            )
        } else {
            write!(
                f,
                "policy {} may not claim in namespace `{}`: its digest is not registered there (accepted: {}); a foreign or tampered policy is refused, a new version is activated with `idem policy activate`; nothing was written",
                self.found,
                self.namespace,
                self.accepted.join(", ")
            )
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Verdict {
    Accepted,
    OpenUntil(Instant),
}

/// The engine's memory of whether its policy may claim.
#[derive(Debug, Default)]
pub(super) struct Admission {
    verdict: Mutex<Option<Verdict>>,
}

impl Admission {
    /// `Ok` when `policy` may claim in its namespace in `store`.
    pub(super) async fn check(
        &self,
        store: &dyn Store,
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
        let verdict = match store.registration(namespace).await? {
            Some(r) if r.accepts(digest) => Verdict::Accepted,
            Some(r) => {
                return Err(EngineError::Unregistered(Box::new(Unregistered {
                    namespace: namespace.clone(),
                    found: digest.to_string(),
                    accepted: r.registered,
                })));
            }
            None if store.requires_registration().await? => {
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
}
