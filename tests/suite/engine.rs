//! The exactly-once engine: a real policy (built .wasm) over a real SQLite
//! file, with the store clock under the test's control.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use idem::core::{Operation, OperationLimits, RecordState};
use idem::engine::{Begin, Engine, EngineError, EngineOptions, Failed, RunResult};
use idem::store::{ManualClock, Outcome, SqliteOptions, SqliteStore, Store, StoreOptions};
use idem_tests::load;

const START_MS: u64 = 1_800_000_000_000;

fn charge(customer: &str, amount: &str) -> Operation {
    let json = format!(
        r#"{{"kind":"charge","tenant":"acme","fields":{{"customer":"{customer}","billing_period":"2026-11","invoice_id":"inv-{customer}","amount":"{amount}","currency":"EUR"}},"run":{{"run_id":"nightly","trigger":"scheduled","attempt":1}}}}"#
    );
    Operation::from_json(&json, &OperationLimits::default()).unwrap()
}

struct Setup {
    _dir: tempfile::TempDir,
    clock: ManualClock,
    store: Store,
}

fn sqlite() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(START_MS);
    let options = StoreOptions {
        clock: clock.store_clock(),
        ..StoreOptions::default()
    };
    let store = SqliteStore::open(
        &dir.path().join("idem.db"),
        SqliteOptions::default(),
        options,
    )
    .unwrap();
    Setup {
        _dir: dir,
        clock,
        store: store.into(),
    }
}

fn engine(setup: &Setup, policy: &str) -> Engine {
    Engine::new(load(policy), setup.store.clone(), EngineOptions::default())
}

fn execute(b: Begin) -> idem::engine::Execution {
    match b {
        Begin::Execute(e) => e,
        other => panic!("expected to execute, got {other:?}"),
    }
}

#[tokio::test]
async fn a_completed_effect_is_replayed_never_repeated() {
    let s = sqlite();
    let engine = engine(&s, "billing-charge");
    let op = charge("c1", "100");
    let first = execute(engine.begin(&op).await.unwrap());
    assert_eq!((first.attempt(), first.is_take_over()), (1, false));
    // While it runs, a duplicate is told it is in progress, with retry-after.
    match engine.begin(&op).await.unwrap() {
        Begin::InProgress {
            retry_after_ms: Some(ms),
            ..
        } => assert!(ms > 0 && ms <= 300_000, "{ms}"),
        other => panic!("expected in-progress, got {other:?}"),
    }
    let fence = first.fence();
    first
        .complete(Outcome::new(0, b"receipt-1".to_vec()))
        .await
        .unwrap();
    for _ in 0..3 {
        match engine.begin(&op).await.unwrap() {
            Begin::Replay(r) => {
                assert_eq!(r.outcome.body, b"receipt-1");
                assert_eq!((r.state, r.fence), (RecordState::Completed, fence));
            }
            other => panic!("expected a replay, got {other:?}"),
        }
    }
}

/// A batch claim gives each operation what `begin` would have given it, in
/// order, and what it executes is held like any claim.
#[tokio::test]
async fn a_batch_begins_each_operation_as_begin_would() {
    let s = sqlite();
    let engine = engine(&s, "billing-charge");
    let done = execute(engine.begin(&charge("c1", "100")).await.unwrap());
    done.complete(Outcome::new(0, b"receipt-1".to_vec()))
        .await
        .unwrap();
    let running = execute(engine.begin(&charge("c2", "100")).await.unwrap());
    let ops = [
        charge("c1", "100"), // completed: replay
        charge("c2", "100"), // held by `running`: in progress
        charge("c3", "100"), // fresh: execute
        charge("c3", "100"), // the batch just claimed it: in progress
        charge("c1", "120"), // another amount: conflict
        charge("c4", "100"), // fresh: execute
    ];
    let items = ops
        .iter()
        .map(|op| (op.clone(), engine.derive(op).unwrap()))
        .collect();
    let claimed = engine.claim_batch(items).await.unwrap();
    assert_eq!(claimed.len(), ops.len());
    let fresh: Vec<bool> = claimed.iter().map(|c| c.is_fresh()).collect();
    assert_eq!(fresh, [false, false, true, false, false, true]);
    let mut begun = Vec::new();
    for c in claimed {
        begun.push(engine.begin_claimed(c).await.unwrap());
    }
    let mut begun = begun.into_iter();
    match begun.next().unwrap() {
        Begin::Replay(r) => assert_eq!(r.outcome.body, b"receipt-1"),
        other => panic!("expected a replay, got {other:?}"),
    }
    assert!(matches!(begun.next().unwrap(), Begin::InProgress { .. }));
    let c3 = execute(begun.next().unwrap());
    assert!(matches!(begun.next().unwrap(), Begin::InProgress { .. }));
    assert!(matches!(
        begun.next().unwrap(),
        Begin::Conflict { status: 422, .. }
    ));
    let c4 = execute(begun.next().unwrap());
    assert!(c3.fence() > running.fence() && c4.fence() > running.fence());
    assert_ne!(c3.fence(), c4.fence());
    // The batch's claims are real: completing them makes later begins replay.
    c3.complete(Outcome::new(0, b"receipt-3".to_vec()))
        .await
        .unwrap();
    match engine.begin(&charge("c3", "100")).await.unwrap() {
        Begin::Replay(r) => assert_eq!(r.outcome.body, b"receipt-3"),
        other => panic!("expected a replay, got {other:?}"),
    }
    assert!(
        engine.claim_batch(Vec::new()).await.unwrap().is_empty(),
        "an empty batch claims nothing"
    );
}

#[tokio::test]
async fn the_same_key_with_another_amount_is_a_conflict() {
    let s = sqlite();
    let engine = engine(&s, "billing-charge");
    execute(engine.begin(&charge("c1", "100")).await.unwrap())
        .complete(Outcome::new(0, vec![]))
        .await
        .unwrap();
    match engine.begin(&charge("c1", "120")).await.unwrap() {
        Begin::Conflict { status, .. } => assert_eq!(status, 422),
        other => panic!("expected a conflict, got {other:?}"),
    }
}

#[tokio::test]
async fn a_retryable_failure_is_taken_over_with_a_higher_fence() {
    let s = sqlite();
    let engine = engine(&s, "billing-charge");
    let op = charge("c2", "100");
    let first = execute(engine.begin(&op).await.unwrap());
    let first_fence = first.fence();
    first
        .fail(true, Outcome::error(75, "card network timeout"))
        .await
        .unwrap();
    let second = execute(engine.begin(&op).await.unwrap());
    assert!(second.fence() > first_fence);
    assert_eq!((second.attempt(), second.is_take_over()), (2, true));
    assert_eq!(
        second.key(),
        &idem::store::RecordKey::new("billing", engine.derive(&op).unwrap().key)
    );
}

#[tokio::test]
async fn an_expired_claim_goes_to_review_and_the_paused_holder_is_fenced() {
    // The seed's scenario: the holder pauses past its lease.
    let s = sqlite();
    let engine = engine(&s, "billing-charge");
    let op = charge("c3", "100");
    let paused = execute(engine.begin(&op).await.unwrap());
    s.clock.advance(Duration::from_secs(301)); // past the policy's 300 s lease, by the store's clock
    match engine.begin(&op).await.unwrap() {
        Begin::Rejected {
            marked_unknown: true,
            status: 409,
            ..
        } => {}
        other => panic!("expected review (outcome-unknown), got {other:?}"),
    }
    // The paused holder wakes up and tries to record its charge: refused.
    let err = paused
        .complete(Outcome::new(0, b"late".to_vec()))
        .await
        .unwrap_err();
    assert!(matches!(err, EngineError::Fenced(_)), "{err}");
    let view = s
        .store
        .records()
        .get(&idem::store::RecordKey::new(
            "billing",
            engine.derive(&op).unwrap().key,
        ))
        .await
        .unwrap();
    let record = view.unwrap().record;
    assert_eq!(record.state, RecordState::OutcomeUnknown);
    assert_eq!(record.outcome, None, "the late completion changed nothing");
}

#[tokio::test]
async fn a_take_over_deposes_the_old_holder() {
    // A policy that re-executes expired claims (the misbehaving fixture always
    // says re-execute): the new holder gets a higher fence, the old one is
    // fenced on every write.
    let s = sqlite();
    let engine = engine(&s, "fixture-misbehaving");
    let op = Operation::from_json(
        r#"{"kind":"fine","tenant":"t"}"#,
        &OperationLimits::default(),
    )
    .unwrap();
    let mut old = execute(engine.begin(&op).await.unwrap());
    // Live lease: re-execute is unsafe, the host refuses it (fail closed).
    let err = engine.begin(&op).await.unwrap_err();
    assert!(
        matches!(err, EngineError::Policy(idem::policy::EvalError::Unsafe(_))),
        "{err}"
    );
    s.clock.advance(Duration::from_secs(301));
    let new = execute(engine.begin(&op).await.unwrap());
    assert!(new.fence() > old.fence() && new.is_take_over());
    assert!(matches!(
        old.heartbeat().await.unwrap_err(),
        EngineError::Fenced(_)
    ));
    assert!(matches!(
        old.complete(Outcome::new(0, vec![])).await.unwrap_err(),
        EngineError::Fenced(_)
    ));
    new.complete(Outcome::new(0, b"new".to_vec()))
        .await
        .unwrap();
    // A completed record is never re-executed, even by this policy.
    let err = engine.begin(&op).await.unwrap_err();
    assert!(err.to_string().contains("never executed again"), "{err}");
}

#[tokio::test]
async fn run_once_runs_the_effect_once() {
    let s = sqlite();
    let engine = engine(&s, "billing-charge");
    let op = charge("c4", "100");
    let runs = AtomicU32::new(0);
    for _ in 0..3 {
        let result = engine
            .run_once(&op, |ctx| {
                runs.fetch_add(1, Ordering::SeqCst);
                async move {
                    assert_eq!(ctx.key.len(), 64);
                    Ok::<_, Failed>(Outcome::new(
                        0,
                        format!("charged with fence {}", ctx.fence).into_bytes(),
                    ))
                }
            })
            .await
            .unwrap();
        assert!(
            matches!(
                result,
                RunResult::Executed { .. } | RunResult::NotRun(Begin::Replay(_))
            ),
            "{result:?}"
        );
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_policy_refusal_claims_nothing() {
    let s = sqlite();
    let engine = engine(&s, "billing-charge");
    let bad = Operation::from_json(
        r#"{"kind":"charge","tenant":"acme","fields":{}}"#,
        &OperationLimits::default(),
    )
    .unwrap();
    assert!(matches!(
        engine.begin(&bad).await.unwrap_err(),
        EngineError::Refused(_)
    ));
    assert!(
        s.store
            .records()
            .list(Default::default())
            .await
            .unwrap()
            .is_empty()
    );
}
