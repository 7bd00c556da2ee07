//! Namespace ownership and digest pinning: which policy versions may write
//! into a namespace, which one is active, and the history of who changed
//! that, when (store clock) and why.
//!
//! The store keeps digests and component bytes only; it never looks inside
//! a component (the `idem` library and CLI load them, run the activation
//! gate and the diff, and then ask the store to record the activation). A
//! namespace's registration is one document, changed by
//! [`crate::PolicyRegistry::activate_policy`] and [`crate::PolicyRegistry::rollback_policy`]
//! conditionally on the active digest the caller checked against: two
//! operators racing have one winner, the other is told what is active now.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::StoreError;

/// How many history entries a namespace keeps (the oldest go first).
pub const MAX_HISTORY: usize = 200;

/// What was done to a namespace's registration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum RegistryAction {
    /// A version became active after the gate and the diff passed.
    Activated,
    /// A version became active although the diff showed a key change: a
    /// person accepted it, with a reason.
    Forced,
    /// The previous active version became active again.
    RolledBack,
}

impl RegistryAction {
    /// The spelling shown (`activated`, `forced`, `rolled-back`).
    pub fn as_str(self) -> &'static str {
        match self {
            RegistryAction::Activated => "activated",
            RegistryAction::Forced => "forced",
            RegistryAction::RolledBack => "rolled-back",
        }
    }
}

/// One entry of a namespace's history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegistryEvent {
    /// What was done.
    pub action: RegistryAction,
    /// The digest that became active.
    pub digest: String,
    /// The digest that was active before (none for the first activation).
    pub previous: Option<String>,
    /// Who did it.
    pub by: String,
    /// Why (required for a forced activation and a rollback).
    pub reason: Option<String>,
    /// When, by the store clock (ms since the epoch).
    pub at_ms: u64,
}

/// A dual-read window: for a while after an upgrade, a claim also looks up
/// the key the replaced version derives, so a duplicate across the upgrade
/// is still caught.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DualRead {
    /// The replaced version's digest.
    pub previous: String,
    /// Until when (store clock, ms since the epoch).
    pub until_ms: u64,
}

/// A namespace's registration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Registration {
    /// The namespace.
    pub namespace: String,
    /// Moves on every change (the document's version).
    pub revision: u64,
    /// The active version's digest.
    pub active: String,
    /// Every digest ever made active here, oldest first: the versions whose
    /// claims the namespace accepts (a fleet upgrades one machine at a
    /// time; a rollback goes back to one of them).
    pub registered: Vec<String>,
    /// The dual-read window of the last upgrade, if it asked for one.
    pub dual_read: Option<DualRead>,
    /// What was done, oldest first (at most [`MAX_HISTORY`]).
    pub history: Vec<RegistryEvent>,
}

impl Registration {
    /// Whether claims from the policy with `digest` are accepted.
    pub fn accepts(&self, digest: &str) -> bool {
        self.registered.iter().any(|d| d == digest)
    }

    /// The dual-read window, while it is open at `now_ms`.
    pub fn dual_read_at(&self, now_ms: u64) -> Option<&DualRead> {
        self.dual_read.as_ref().filter(|d| d.until_ms > now_ms)
    }
}

/// An activation, for [`crate::PolicyRegistry::activate_policy`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Activation {
    /// The namespace the policy writes into.
    pub namespace: String,
    /// The policy's digest (`sha256:<64 hex>`).
    pub digest: String,
    /// The component's bytes (kept, so a rollback or a dual read needs no
    /// file).
    pub component: Vec<u8>,
    /// The active digest the caller checked the upgrade against (`None`:
    /// the namespace has no registration yet). The activation is refused
    /// ([`StoreError::RegistryMoved`]) when it is no longer the active one.
    pub expected_active: Option<String>,
    /// Whether a person accepted a key-changing upgrade.
    pub forced: bool,
    /// Who (1 to 256 bytes, no control characters).
    pub by: String,
    /// Why; required when forced.
    pub reason: Option<String>,
    /// A dual-read window to open from now (store clock) with the replaced
    /// version, when there is one.
    pub dual_read: Option<Duration>,
}

/// A rollback, for [`crate::PolicyRegistry::rollback_policy`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rollback {
    /// The namespace.
    pub namespace: String,
    /// The active digest the caller saw: refused when it moved on.
    pub expected_active: String,
    /// Who.
    pub by: String,
    /// Why (required).
    pub reason: String,
}

/// The stored form of a registration (its JSON document).
pub(crate) fn encode(registration: &Registration) -> String {
    serde_json::to_string(registration).expect("a registration always serialises")
}

/// Reads a stored registration back.
pub(crate) fn decode(text: &str, store: &str) -> Result<Registration, StoreError> {
    serde_json::from_str(text).map_err(|e| StoreError::Corrupt {
        store: store.to_string(),
        what: format!("a namespace registration does not read: {e}"),
    })
}
