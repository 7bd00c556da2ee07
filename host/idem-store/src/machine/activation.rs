//! What an activation or a rollback does to a namespace's registration:
//! checked first, then a change the backend applies atomically to the
//! registration it reads, by its clock.

use super::{after, check_name};
use crate::vocabulary::{
    Activation, DualRead, MAX_HISTORY, Registration, RegistryAction, RegistryEvent, Rollback,
    StoreError, bounded_note,
};

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
    if let Some(reason) = reason {
        super::storable("the reason", reason)?;
    }
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
    check_name("activator (--by)", &request.by)?;
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
                until_ms: after(now, window),
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
    check_name("who rolls back (--by)", &request.by)?;
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
