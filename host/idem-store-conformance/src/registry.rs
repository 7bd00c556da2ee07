//! Namespace ownership and digest pinning: activations conditional on the
//! active digest, history by the store clock, rollbacks, kept components,
//! the store-wide requirement, racing activations, and all of it kept
//! across a reopen.

use std::future::Future;

use super::Fixture;
use super::assert::{fixture, ms};
use idem_store::{Activation, DualRead, RegistryAction, Rollback, Store, StoreError, StoreOptions};

fn digest(n: u8) -> String {
    format!("sha256:{}", format!("{n:02x}").repeat(32))
}

fn activation(n: u8, expected: Option<u8>) -> Activation {
    Activation {
        namespace: "billing".into(),
        digest: digest(n),
        component: vec![0, b'a', b's', b'm', n],
        expected_active: expected.map(digest),
        forced: false,
        by: "alice".into(),
        reason: None,
        dual_read: None,
    }
}

fn rollback(expected: u8, reason: &str) -> Rollback {
    Rollback {
        namespace: "billing".into(),
        expected_active: digest(expected),
        by: "bob".into(),
        reason: reason.into(),
    }
}

fn assert_moved<T: std::fmt::Debug>(r: Result<T, StoreError>, found: &str) {
    match r {
        Err(StoreError::RegistryMoved { found: f, .. }) if f == found => {}
        other => panic!("expected RegistryMoved (found {found}), got {other:?}"),
    }
}

fn assert_invalid<T: std::fmt::Debug>(r: Result<T, StoreError>, says: &str) {
    match r {
        Err(StoreError::InvalidRequest(why)) if why.contains(says) => {}
        other => panic!("expected InvalidRequest ({says}), got {other:?}"),
    }
}

/// An activation registers and pins a digest, logged by the store clock;
/// one checked against a stale active digest is refused and changes
/// nothing; a forced one needs a reason and may open a dual-read window; a
/// rollback goes back to the version active before (and no further than
/// the first); components, registrations and the requirement survive a
/// reopen.
pub async fn activation_pins_digests_and_logs_history<F, Fut>(factory: &F)
where
    F: Fn(StoreOptions) -> Fut,
    Fut: Future<Output = Fixture>,
{
    let (fx, clock) = fixture(factory, idem_store::DEFAULT_MAX_OUTCOME_BYTES).await;
    let store = &fx.store;
    let name = store.describe();
    assert_eq!(
        store
            .registry()
            .registration("billing")
            .await
            .expect("read"),
        None
    );
    assert!(
        !store
            .registry()
            .requires_registration()
            .await
            .expect("setting"),
        "{name}: off by default"
    );

    let first = store
        .registry()
        .activate_policy(activation(1, None))
        .await
        .expect("first activation");
    assert_eq!(first.active, digest(1));
    assert_eq!(first.registered, [digest(1)]);
    assert_eq!(first.history.len(), 1);
    assert_eq!(first.history[0].action, RegistryAction::Activated);
    assert_eq!(
        first.history[0].at_ms,
        super::START_MS,
        "{name}: store clock"
    );
    assert_eq!(first.history[0].previous, None);
    assert_eq!(
        store
            .registry()
            .policy_component(&digest(1))
            .await
            .expect("component"),
        Some(vec![0, b'a', b's', b'm', 1])
    );

    // Checked against no registration, but there is one now.
    assert_moved(
        store.registry().activate_policy(activation(2, None)).await,
        &digest(1),
    );
    assert_invalid(
        store
            .registry()
            .activate_policy(Activation {
                forced: true,
                ..activation(2, Some(1))
            })
            .await,
        "reason",
    );
    assert_invalid(
        store
            .registry()
            .activate_policy(Activation {
                digest: "md5:00".into(),
                ..activation(2, Some(1))
            })
            .await,
        "md5:00",
    );
    assert_eq!(
        store
            .registry()
            .registration("billing")
            .await
            .expect("read")
            .as_ref(),
        Some(&first),
        "{name}: a refusal changes nothing"
    );
    assert_eq!(
        store
            .registry()
            .policy_component(&digest(2))
            .await
            .expect("read"),
        None
    );

    clock.advance(ms(1_000));
    let forced = store
        .registry()
        .activate_policy(Activation {
            forced: true,
            reason: Some("keys move to the new invoice ids; old ones settled".into()),
            dual_read: Some(ms(3_600_000)),
            ..activation(2, Some(1))
        })
        .await
        .expect("forced activation");
    assert_eq!(forced.active, digest(2));
    assert_eq!(forced.registered, [digest(1), digest(2)]);
    assert!(
        forced.accepts(&digest(1)) && forced.accepts(&digest(2)) && !forced.accepts(&digest(3))
    );
    let now = super::START_MS + 1_000;
    assert_eq!(
        forced.dual_read,
        Some(DualRead {
            previous: digest(1),
            until_ms: now + 3_600_000
        })
    );
    assert!(forced.dual_read_at(now).is_some());
    assert!(forced.dual_read_at(now + 3_600_000).is_none());
    let event = &forced.history[1];
    assert_eq!(event.action, RegistryAction::Forced);
    assert_eq!((event.by.as_str(), event.at_ms), ("alice", now));
    assert_eq!(event.previous.as_deref(), Some(digest(1).as_str()));
    assert!(event.reason.as_deref().unwrap().starts_with("keys move"));
    // The active digest again: nothing to record.
    let again = store
        .registry()
        .activate_policy(activation(2, Some(2)))
        .await
        .expect("again");
    assert_eq!(again, forced, "{name}: activating the active digest");

    assert_moved(
        store.registry().rollback_policy(rollback(1, "oops")).await,
        &digest(2),
    );
    assert_invalid(
        store.registry().rollback_policy(rollback(2, " ")).await,
        "reason",
    );
    let back = store
        .registry()
        .rollback_policy(rollback(2, "the new keys broke reconciliation"))
        .await
        .expect("rollback");
    assert_eq!(back.active, digest(1));
    assert_eq!(back.dual_read, None);
    assert_eq!(back.registered, [digest(1), digest(2)], "still registered");
    let event = back.history.last().unwrap();
    assert_eq!(event.action, RegistryAction::RolledBack);
    assert_eq!(event.previous.as_deref(), Some(digest(2).as_str()));
    // Version 1 was the first: there is nothing before it.
    assert_invalid(
        store.registry().rollback_policy(rollback(1, "again")).await,
        "no earlier version",
    );

    store
        .registry()
        .set_require_registration(true)
        .await
        .expect("on");
    assert!(
        store
            .registry()
            .requires_registration()
            .await
            .expect("setting")
    );
    assert_eq!(
        store.registry().registrations().await.expect("all"),
        std::slice::from_ref(&back)
    );

    if let Some(reopen) = &fx.reopen {
        let again = reopen().await;
        assert_eq!(
            again
                .registry()
                .registration("billing")
                .await
                .expect("read"),
            Some(back)
        );
        assert!(
            again
                .registry()
                .requires_registration()
                .await
                .expect("setting")
        );
        assert!(
            again
                .registry()
                .policy_component(&digest(2))
                .await
                .expect("read")
                .is_some()
        );
        again
            .registry()
            .set_require_registration(false)
            .await
            .expect("off");
        assert!(
            !again
                .registry()
                .requires_registration()
                .await
                .expect("setting")
        );
    }
}

/// Activations racing from the same active version have one winner; the
/// others are told what is active now, and the history holds one entry.
pub async fn racing_activations_have_one_winner<F, Fut>(factory: &F)
where
    F: Fn(StoreOptions) -> Fut,
    Fut: Future<Output = Fixture>,
{
    let (fx, _clock) = fixture(factory, idem_store::DEFAULT_MAX_OUTCOME_BYTES).await;
    let store: Store = fx.store.clone();
    store
        .registry()
        .activate_policy(activation(1, None))
        .await
        .expect("first");
    let racers: Vec<_> = (2..=6u8)
        .map(|n| {
            let store = store.clone();
            tokio::spawn(async move {
                store
                    .registry()
                    .activate_policy(activation(n, Some(1)))
                    .await
            })
        })
        .collect();
    let mut won = Vec::new();
    for racer in racers {
        match racer.await.expect("task") {
            Ok(r) => won.push(r.active),
            Err(StoreError::RegistryMoved { .. }) => {}
            Err(other) => panic!("{}: {other}", store.describe()),
        }
    }
    assert_eq!(won.len(), 1, "{}: {won:?}", store.describe());
    let now = store
        .registry()
        .registration("billing")
        .await
        .expect("read")
        .unwrap();
    assert_eq!(now.active, won[0]);
    assert_eq!(now.history.len(), 2);
    assert_eq!(now.registered.len(), 2);
}
