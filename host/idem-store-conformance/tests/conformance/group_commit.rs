//! Group commit seen from outside, on real SQLite files and PostgreSQL:
//! waiting callers in one store call, a caller that gave up left out,
//! claims and finishes together, and contention claiming each key once.

use super::*;

/// Waits (polling) until `ready` holds; panics after a minute, naming
/// `what`, so that a broken group commit fails the test instead of hanging
/// it. Not a timing assertion: the condition is what is checked.
async fn until(what: &str, mut ready: impl FnMut() -> bool) {
    let give_up = std::time::Instant::now() + Duration::from_secs(60);
    while !ready() {
        assert!(
            std::time::Instant::now() < give_up,
            "gave up waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Group commit, seen from outside on a real SQLite file: while one claim's
/// commit is held up (another connection holds the write lock), every other
/// caller waits in line, and all of them then go in *one* store call; each
/// gets its own answer (a key asked twice in the batch: one claim, one
/// duplicate), fences are distinct, and finishes group the same way, each
/// conditional on its own fence (a stale one is refused alone).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_commit_sends_the_waiting_callers_in_one_call() {
    use idem_store::{ClaimRequest, GroupCommit, GroupCommitOptions};

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idem.db");
    let sqlite = SqliteOptions {
        busy_timeout: Duration::from_secs(60),
        ..SqliteOptions::default()
    };
    let inner = Store::from(SqliteStore::open(&path, sqlite, StoreOptions::default()).unwrap());
    let grouped = Arc::new(GroupCommit::new(
        inner.writes_handle(),
        GroupCommitOptions::default(),
    ));
    let store = inner.with_writes(grouped.clone());
    let lock = |c: &rusqlite::Connection| c.execute_batch("BEGIN IMMEDIATE").unwrap();
    let blocker = rusqlite::Connection::open(&path).unwrap();

    // Keys 0..20, and key 7 asked for a second time by another worker.
    let requests: Vec<ClaimRequest> = (0..20u32)
        .map(|n| request(&conformance::key(n), n, 60_000, 600_000, n))
        .chain([request(&conformance::key(7), 7, 60_000, 600_000, 99)])
        .collect();
    lock(&blocker);
    let claim = |r: ClaimRequest| {
        let store = store.clone();
        tokio::spawn(async move { store.writes().claim(r).await })
    };
    let mut tasks = vec![claim(requests[0].clone())];
    until("the first claim to be sent", || {
        grouped.stats().claims.calls == 1
    })
    .await;
    tasks.extend(requests[1..].iter().cloned().map(claim));
    until("the other claims to wait in line", || {
        grouped.stats().claims.waiting == requests.len() - 1
    })
    .await;
    blocker.execute_batch("COMMIT").unwrap();
    let mut claims = Vec::new();
    let mut duplicates = 0;
    for task in tasks {
        match task.await.unwrap().unwrap() {
            ClaimOutcome::Claimed(c) => claims.push(c),
            ClaimOutcome::Existing(e) => {
                assert_eq!(e.view.record.key, conformance::key(7));
                duplicates += 1;
            }
        }
    }
    assert_eq!((claims.len(), duplicates), (20, 1));
    let stats = grouped.stats().claims;
    assert_eq!(
        (stats.calls, stats.items),
        (2, 21),
        "one lone call, then one call for everyone who waited"
    );
    let mut fences: Vec<u64> = claims.iter().map(|c| c.fence).collect();
    fences.sort_unstable();
    fences.dedup();
    assert_eq!(fences.len(), 20, "every claim under a fence of its own");

    // Finishes: the first held up, the rest in one call; one of them with a
    // stale fence is refused alone.
    lock(&blocker);
    let finish = |key: idem_store::RecordKey, fence: u64| {
        let store = store.clone();
        tokio::spawn(async move {
            store
                .writes()
                .complete(&key, fence, Outcome::new(0, b"ok".to_vec()))
                .await
        })
    };
    let mut tasks = vec![finish(claims[0].key.clone(), claims[0].fence)];
    until("the first finish to be sent", || {
        grouped.stats().finishes.calls == 1
    })
    .await;
    for (i, c) in claims.iter().enumerate().skip(1) {
        let fence = if i == 3 { c.fence - 1 } else { c.fence };
        tasks.push(finish(c.key.clone(), fence));
    }
    until("the other finishes to wait in line", || {
        grouped.stats().finishes.waiting == claims.len() - 1
    })
    .await;
    blocker.execute_batch("COMMIT").unwrap();
    for (i, task) in tasks.into_iter().enumerate() {
        let result = task.await.unwrap();
        if i == 3 {
            assert!(
                matches!(result, Err(StoreError::Fenced { .. })),
                "the stale fence is refused: {result:?}"
            );
        } else {
            result.unwrap();
        }
    }
    let stats = grouped.stats().finishes;
    assert_eq!((stats.calls, stats.items), (2, 20));
    for (i, c) in claims.iter().enumerate() {
        let state = store
            .records()
            .get(&c.key)
            .await
            .unwrap()
            .unwrap()
            .record
            .state;
        let expected = if i == 3 {
            RecordState::InProgress
        } else {
            RecordState::Completed
        };
        assert_eq!(state, expected, "claim {i}");
    }
}

/// A caller that gives up while it waits in line is left out of the batch:
/// nothing is written for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_commit_leaves_out_a_caller_that_gave_up() {
    use idem_store::{GroupCommit, GroupCommitOptions};

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idem.db");
    let sqlite = SqliteOptions {
        busy_timeout: Duration::from_secs(60),
        ..SqliteOptions::default()
    };
    let inner = Store::from(SqliteStore::open(&path, sqlite, StoreOptions::default()).unwrap());
    let grouped = Arc::new(GroupCommit::new(
        inner.writes_handle(),
        GroupCommitOptions::default(),
    ));
    let store = inner.with_writes(grouped.clone());
    let blocker = rusqlite::Connection::open(&path).unwrap();
    blocker.execute_batch("BEGIN IMMEDIATE").unwrap();
    let claim = |n: u32| {
        let store = store.clone();
        tokio::spawn(async move {
            store
                .writes()
                .claim(request(&conformance::key(n), n, 60_000, 600_000, n))
                .await
        })
    };
    let first = claim(0);
    until("the first claim to be sent", || {
        grouped.stats().claims.calls == 1
    })
    .await;
    let kept = claim(1);
    let abandoned = claim(2);
    until("two claims to wait in line", || {
        grouped.stats().claims.waiting == 2
    })
    .await;
    abandoned.abort();
    let _ = abandoned.await;
    blocker.execute_batch("COMMIT").unwrap();
    assert!(matches!(
        first.await.unwrap().unwrap(),
        ClaimOutcome::Claimed(_)
    ));
    assert!(matches!(
        kept.await.unwrap().unwrap(),
        ClaimOutcome::Claimed(_)
    ));
    assert!(
        store
            .records()
            .get(&conformance::key(2))
            .await
            .unwrap()
            .is_none(),
        "nothing written for the caller that gave up"
    );
    assert_eq!(grouped.stats().claims.items, 2);
}

/// On one writer (SQLite: [`idem_store::Batching::one_transaction`]) claims and finishes
/// wait in one line (a caller's own small `claim_many` too): those that
/// queued together while a call was held up go in *one* store call (one
/// commit), each with its own answer — fresh
/// claims under new fences above every earlier one, finishes each
/// conditional on its own fence (a stale one refused alone).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_commit_sends_waiting_claims_and_finishes_together_on_one_writer() {
    use idem_store::{GroupCommit, GroupCommitOptions};

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idem.db");
    let sqlite = SqliteOptions {
        busy_timeout: Duration::from_secs(60),
        ..SqliteOptions::default()
    };
    let inner = Store::from(SqliteStore::open(&path, sqlite, StoreOptions::default()).unwrap());
    assert!(
        inner.writes().batching().one_transaction,
        "SQLite has one writer"
    );
    let grouped = Arc::new(GroupCommit::new(
        inner.writes_handle(),
        GroupCommitOptions::default(),
    ));
    let store = inner.with_writes(grouped.clone());
    let claim = |n: u32| {
        let store = store.clone();
        tokio::spawn(async move {
            store
                .writes()
                .claim(request(&conformance::key(n), n, 60_000, 600_000, n))
                .await
        })
    };
    // Six claims made one by one: their holders finish later.
    let mut held = Vec::new();
    for n in 0..6 {
        match claim(n).await.unwrap().unwrap() {
            ClaimOutcome::Claimed(c) => held.push(c),
            other => panic!("a fresh key is claimed: {other:?}"),
        }
    }
    let highest = held.iter().map(|c| c.fence).max().unwrap();
    let before = grouped.stats();

    let blocker = rusqlite::Connection::open(&path).unwrap();
    blocker.execute_batch("BEGIN IMMEDIATE").unwrap();
    let first = claim(100);
    until("the first claim to be sent", || {
        grouped.stats().calls == before.calls + 1
    })
    .await;
    let claims: Vec<_> = (101..105).map(claim).collect();
    // A job's own small batch joins the same line.
    let batch = {
        let store = store.clone();
        let requests = (105..107)
            .map(|n| request(&conformance::key(n), n, 60_000, 600_000, n))
            .collect();
        tokio::spawn(async move { store.writes().claim_many(requests).await })
    };
    let finishes: Vec<_> = held
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let (store, key) = (store.clone(), c.key.clone());
            let fence = if i == 2 { c.fence - 1 } else { c.fence };
            tokio::spawn(async move {
                store
                    .writes()
                    .complete(&key, fence, Outcome::new(0, b"ok".to_vec()))
                    .await
            })
        })
        .collect();
    until("the claims and finishes to wait in one line", || {
        let now = grouped.stats();
        now.claims.waiting == 6 && now.finishes.waiting == 6
    })
    .await;
    blocker.execute_batch("COMMIT").unwrap();

    let mut fences = Vec::new();
    for task in std::iter::once(first).chain(claims) {
        match task.await.unwrap().unwrap() {
            ClaimOutcome::Claimed(c) => fences.push(c.fence),
            other => panic!("a fresh key is claimed: {other:?}"),
        }
    }
    for outcome in batch.await.unwrap().unwrap() {
        match outcome.unwrap() {
            ClaimOutcome::Claimed(c) => fences.push(c.fence),
            other => panic!("a fresh key is claimed: {other:?}"),
        }
    }
    fences.sort_unstable();
    fences.dedup();
    assert_eq!(fences.len(), 7, "every claim under a fence of its own");
    assert!(
        fences[0] > highest,
        "new fences are above every earlier one"
    );
    for (i, task) in finishes.into_iter().enumerate() {
        let result = task.await.unwrap();
        let state = store
            .records()
            .get(&held[i].key)
            .await
            .unwrap()
            .unwrap()
            .record
            .state;
        if i == 2 {
            assert!(
                matches!(result, Err(StoreError::Fenced { .. })),
                "the stale fence is refused alone: {result:?}"
            );
            assert_eq!(state, RecordState::InProgress);
        } else {
            result.unwrap();
            assert_eq!(state, RecordState::Completed, "finish {i}");
        }
    }
    let after = grouped.stats();
    assert_eq!(
        after.calls - before.calls,
        2,
        "one lone call, then one call for the claims and finishes that waited"
    );
    assert_eq!(
        (
            after.claims.calls - before.claims.calls,
            after.finishes.calls - before.finishes.calls
        ),
        (2, 1)
    );
    assert_eq!(after.finishes.items - before.finishes.items, 6);

    // The next claim after the batch draws above the batch's fences: the
    // batch wrote its last fence back to the sequence.
    match claim(200).await.unwrap().unwrap() {
        ClaimOutcome::Claimed(c) => assert!(c.fence > *fences.last().unwrap()),
        other => panic!("a fresh key is claimed: {other:?}"),
    }
}

/// Makes a fresh store, for tests that try several kinds.
type MakeFixture = Box<dyn Fn() -> conformance::BoxFuture<conformance::Fixture>>;

/// Many concurrent callers through a group commit (two calls of a kind in
/// flight), on SQLite and PostgreSQL: every key is claimed exactly once,
/// every holder's completion under its own fence succeeds, and a write
/// under a stale fence is refused alone, whatever batch it shared.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn group_commit_under_contention_claims_each_key_once() {
    let mut factories: Vec<(&str, MakeFixture)> = vec![(
        "sqlite",
        Box::new(|| {
            Box::pin(conformance::grouped(sqlite_factory(
                SqliteOptions::default(),
            ))(StoreOptions::default()))
        }),
    )];
    if let Some(url) =
        conformance::postgres_test_url("group_commit_under_contention_claims_each_key_once")
    {
        factories.push((
            "postgres",
            Box::new(move || {
                Box::pin(conformance::grouped(conformance::postgres_factory(
                    url.clone(),
                ))(StoreOptions::default()))
            }),
        ));
    }
    for (name, factory) in factories {
        let fixture = factory().await;
        let store = fixture.store.clone();
        let keys = 16u32;
        let mut tasks = tokio::task::JoinSet::new();
        for caller in 0..96u32 {
            let store = store.clone();
            tasks.spawn(async move {
                let k = conformance::key(caller % keys);
                let r = request(&k, caller % keys, 600_000, 600_000, caller);
                match store.writes().claim(r).await.unwrap() {
                    ClaimOutcome::Claimed(claim) => {
                        // Every third holder first tries a stale fence.
                        if caller % 3 == 0 {
                            let stale = store
                                .writes()
                                .complete(&claim.key, claim.fence - 1, Outcome::new(1, "stale"))
                                .await;
                            assert!(matches!(stale, Err(StoreError::Fenced { .. })), "{stale:?}");
                        }
                        store
                            .writes()
                            .complete(&claim.key, claim.fence, Outcome::new(0, "ok"))
                            .await
                            .unwrap();
                        Some(caller % keys)
                    }
                    ClaimOutcome::Existing(_) => None,
                }
            });
        }
        let mut claimed = Vec::new();
        while let Some(joined) = tasks.join_next().await {
            if let Some(k) = joined.unwrap() {
                claimed.push(k);
            }
        }
        claimed.sort_unstable();
        assert_eq!(
            claimed,
            (0..keys).collect::<Vec<_>>(),
            "{name}: every key claimed exactly once"
        );
        for k in 0..keys {
            let view = store
                .records()
                .get(&conformance::key(k))
                .await
                .unwrap()
                .unwrap();
            assert_eq!(view.record.state, RecordState::Completed, "{name}");
            assert_eq!(view.record.outcome.unwrap().status, 0, "{name}");
        }
    }
}
