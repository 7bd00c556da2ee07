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

use crate::attempt::bounded_note;
use crate::error::StoreError;
use crate::machine;

/// How many history entries a namespace keeps (the oldest go first).
pub const MAX_HISTORY: usize = 200;

/// What was done to a namespace's registration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
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

/// What a registration change is, for the backends (a pure function of
/// the current registration and the store clock).
pub(crate) type Change =
    Box<dyn Fn(Option<Registration>, u64) -> Result<Registration, StoreError> + Send + Sync>;

fn check_digest(digest: &str) -> Result<(), StoreError> {
    if idem_core::lifecycle::is_policy_digest(digest) {
        Ok(())
    } else {
        Err(StoreError::InvalidRequest(format!(
            "policy digest `{}` is not `sha256:` followed by 64 lowercase hex characters",
            idem_core::text::bounded(digest, 80)
        )))
    }
}

fn check_namespace(namespace: &str) -> Result<(), StoreError> {
    if namespace.is_empty() || namespace.len() > 256 || namespace.chars().any(char::is_control) {
        return Err(StoreError::InvalidRequest(
            "a namespace is 1 to 256 bytes without control characters".into(),
        ));
    }
    Ok(())
}

fn reason_of(reason: Option<&str>, required: Option<&str>) -> Result<Option<String>, StoreError> {
    match reason.map(str::trim).filter(|r| !r.is_empty()) {
        Some(r) => Ok(Some(bounded_note(r.to_string()))),
        None => match required {
            Some(what) => Err(StoreError::InvalidRequest(format!("{what} needs a reason"))),
            None => Ok(None),
        },
    }
}

fn moved(namespace: &str, expected: Option<&str>, found: Option<&str>) -> StoreError {
    StoreError::RegistryMoved {
        namespace: namespace.to_string(),
        expected: expected.unwrap_or("none").to_string(),
        found: found.unwrap_or("none").to_string(),
    }
}

fn push(history: &mut Vec<RegistryEvent>, event: RegistryEvent) {
    history.push(event);
    if history.len() > MAX_HISTORY {
        history.drain(..history.len() - MAX_HISTORY);
    }
}

/// Checks an activation and returns the change it makes.
pub(crate) fn activate(request: &Activation) -> Result<Change, StoreError> {
    check_namespace(&request.namespace)?;
    check_digest(&request.digest)?;
    if let Some(expected) = &request.expected_active {
        check_digest(expected)?;
    }
    machine::check_name("activator (--by)", &request.by)?;
    let reason = reason_of(
        request.reason.as_deref(),
        request.forced.then_some("a forced activation"),
    )?;
    let request = request.clone();
    Ok(Box::new(move |current, now| {
        let found = current.as_ref().map(|r| r.active.as_str());
        if found != request.expected_active.as_deref() {
            return Err(moved(
                &request.namespace,
                request.expected_active.as_deref(),
                found,
            ));
        }
        let mut next = current.clone().unwrap_or(Registration {
            namespace: request.namespace.clone(),
            revision: 0,
            active: request.digest.clone(),
            registered: Vec::new(),
            dual_read: None,
            history: Vec::new(),
        });
        let previous = current.as_ref().map(|r| r.active.clone());
        if previous.as_deref() == Some(request.digest.as_str()) {
            // Already active: nothing to record.
            return Ok(next);
        }
        next.revision += 1;
        next.active = request.digest.clone();
        if !next.accepts(&request.digest) {
            next.registered.push(request.digest.clone());
        }
        next.dual_read = match (&previous, request.dual_read) {
            (Some(previous), Some(window)) => Some(DualRead {
                previous: previous.clone(),
                until_ms: machine::after(now, window),
            }),
            _ => None,
        };
        push(
            &mut next.history,
            RegistryEvent {
                action: if request.forced {
                    RegistryAction::Forced
                } else {
                    RegistryAction::Activated
                },
                digest: request.digest.clone(),
                previous,
                by: request.by.clone(),
                reason: reason.clone(),
                at_ms: now,
            },
        );
        Ok(next)
    }))
}

/// Checks a rollback and returns the change it makes: the version active
/// before the current one becomes active again (the dual-read window
/// closes: the keys are the older version's again).
pub(crate) fn rollback(request: &Rollback) -> Result<Change, StoreError> {
    check_namespace(&request.namespace)?;
    machine::check_name("who rolls back (--by)", &request.by)?;
    let reason = reason_of(Some(&request.reason), Some("a rollback"))?;
    let request = request.clone();
    Ok(Box::new(move |current, now| {
        let Some(mut next) = current else {
            return Err(StoreError::InvalidRequest(format!(
                "namespace `{}` has no registered policy to roll back",
                request.namespace
            )));
        };
        if next.active != request.expected_active {
            return Err(moved(
                &request.namespace,
                Some(&request.expected_active),
                Some(&next.active),
            ));
        }
        // The version that was active before the current one was made
        // active (by an activation, not by a rollback: rolling back twice
        // goes further back, never forward again).
        let before = next
            .history
            .iter()
            .rev()
            .find(|e| e.digest == next.active && e.action != RegistryAction::RolledBack)
            .and_then(|e| e.previous.clone())
            .ok_or_else(|| {
                StoreError::InvalidRequest(format!(
                    "namespace `{}` has no earlier version to roll back to",
                    request.namespace
                ))
            })?;
        let previous = std::mem::replace(&mut next.active, before.clone());
        next.revision += 1;
        next.dual_read = None;
        push(
            &mut next.history,
            RegistryEvent {
                action: RegistryAction::RolledBack,
                digest: before,
                previous: Some(previous),
                by: request.by.clone(),
                reason: reason.clone(),
                at_ms: now,
            },
        );
        Ok(next)
    }))
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
