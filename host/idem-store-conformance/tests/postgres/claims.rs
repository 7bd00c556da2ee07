//! Claims on a real PostgreSQL server: leases by the database's clock, the
//! fast claim against the machine at the extremes, racing connections,
//! take-overs and replacements with one winner, and a membership change
//! racing claims.

use super::*;

/// Production reads the database's clock, not this process's: a lease is
/// measured from the server's `clock_timestamp()`, and an offset clock
/// shifts it.
#[tokio::test]
async fn leases_are_measured_by_the_database_clock() {
    let Some(url) = postgres_test_url("leases_are_measured_by_the_database_clock") else {
        return;
    };
    let target = fresh(&url);
    let client = raw(&url).await;
    let db_now = || async {
        let row = client
            .query_one(
                "SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::int8",
                &[],
            )
            .await
            .expect("clock");
        u64::try_from(row.get::<_, i64>(0)).expect("after 1970")
    };
    let day: u64 = 86_400_000;
    for (offset, store_clock) in [
        (0, StoreClock::system()),
        (day, StoreClock::system_with_offset(day as i64)),
    ] {
        let store = PostgresStore::open(
            target.clone(),
            StoreOptions {
                clock: store_clock,
                ..StoreOptions::default()
            },
        )
        .await
        .expect("open");
        let k = RecordKey::new("clock", idem_core::Digest::of_bytes(&offset.to_le_bytes()));
        let before = db_now().await;
        let claim = match store
            .claim(request(&k, 1, 5_000, 60_000, 1))
            .await
            .expect("claim")
        {
            ClaimOutcome::Claimed(c) => c,
            other => panic!("expected a claim, got {other:?}"),
        };
        let after = db_now().await;
        assert!(
            (before + offset + 5_000..=after + offset + 5_000).contains(&claim.lease_until_ms),
            "lease until {} not within the database's [{before}, {after}] + {offset} + 5000",
            claim.lease_until_ms
        );
        let view = store.get(&k).await.expect("get").expect("a record");
        assert!(view.now_ms >= before + offset && view.now_ms <= db_now().await + offset);
    }
    drop_schema(&url, &target.schema).await;
}

/// The one-round-trip claim's SQL arithmetic agrees with the state machine
/// (as the memory store runs it) at the extremes, where times are clamped.
#[tokio::test]
async fn the_fast_claim_agrees_with_the_machine_at_the_extremes() {
    let Some(url) = postgres_test_url("the_fast_claim_agrees_with_the_machine_at_the_extremes")
    else {
        return;
    };
    let target = fresh(&url);
    let clock = ManualClock::new(conformance::START_MS);
    let pg = PostgresStore::open(target.clone(), manual_options(&clock))
        .await
        .expect("open");
    let memory = MemoryStore::new(manual_options(&clock));
    for (n, (lease, retention)) in [
        (Duration::MAX, Duration::MAX),
        (Duration::ZERO, Duration::ZERO),
        (Duration::from_millis(10), Duration::MAX),
        (Duration::MAX, Duration::ZERO),
        (Duration::from_millis(1), Duration::from_millis(3)),
    ]
    .into_iter()
    .enumerate()
    {
        let k = conformance::key(n as u32);
        let mut req = request(&k, 1, 0, 0, 1);
        (req.lease, req.retention) = (lease, retention);
        let (ClaimOutcome::Claimed(a), ClaimOutcome::Claimed(b)) = (
            pg.claim(req.clone()).await.expect("pg claim"),
            memory.claim(req).await.expect("memory claim"),
        ) else {
            panic!("expected two claims")
        };
        assert_eq!(a.lease_until_ms, b.lease_until_ms);
        let mut pg_record = pg.get(&k).await.expect("get").expect("pg record").record;
        let memory_record = memory
            .get(&k)
            .await
            .expect("get")
            .expect("memory record")
            .record;
        pg_record.fence = memory_record.fence;
        assert_eq!(
            pg_record, memory_record,
            "lease {lease:?}, retention {retention:?}"
        );
    }
    drop(pg);
    drop_schema(&url, &target.schema).await;
}

/// Tasks on a multi-threaded runtime, each on its own pool connection, and
/// separate pools (as separate processes would have), race to claim one key:
/// exactly one `Claimed`, and every loser sees the winner's record.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_connections_claim_exactly_once() {
    let Some(url) = postgres_test_url("racing_connections_claim_exactly_once") else {
        return;
    };
    const RACERS: usize = 8;
    let target = fresh(&url);
    let shared = Arc::new(
        PostgresStore::open(target.clone(), StoreOptions::default())
            .await
            .expect("open"),
    );
    let mut stores: Vec<Arc<PostgresStore>> = vec![shared.clone(); RACERS / 2];
    for _ in 0..RACERS / 2 {
        stores.push(Arc::new(
            PostgresStore::open(target.clone(), StoreOptions::default())
                .await
                .expect("open another pool"),
        ));
    }
    for round in 0..10 {
        let k = conformance::key(round);
        let outcomes: Vec<ClaimOutcome> = race(&stores, |who, store| {
            let request = request(&k, 1, 60_000, 60_000, who as u32);
            async move { store.claim(request).await.expect("claim") }
        })
        .await;
        let winners: Vec<u64> = outcomes
            .iter()
            .filter_map(|o| match o {
                ClaimOutcome::Claimed(c) => Some(c.fence),
                ClaimOutcome::Existing(_) => None,
            })
            .collect();
        assert_eq!(winners.len(), 1, "round {round}: {outcomes:?}");
        for o in &outcomes {
            if let ClaimOutcome::Existing(e) = o {
                assert_eq!(e.view.record.fence, winners[0], "round {round}");
            }
        }
    }
    drop((shared, stores));
    drop_schema(&url, &target.schema).await;
}

/// Racing take-overs of one expired lease, and racing claims of an expired
/// record (the replace path, under the row lock): one winner each.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_take_overs_and_replacements_have_one_winner() {
    let Some(url) = postgres_test_url("racing_take_overs_and_replacements_have_one_winner") else {
        return;
    };
    const RACERS: usize = 6;
    let target = fresh(&url);
    let clock = ManualClock::new(conformance::START_MS);
    let mut stores = Vec::new();
    for _ in 0..RACERS {
        stores.push(Arc::new(
            PostgresStore::open(target.clone(), manual_options(&clock))
                .await
                .expect("open"),
        ));
    }
    for round in 0..5 {
        let k = conformance::key(round);
        let ClaimOutcome::Claimed(first) = stores[0]
            .claim(request(&k, 1, 1_000, 0, 0))
            .await
            .expect("claim")
        else {
            panic!("expected a claim")
        };
        clock.advance(Duration::from_millis(1_000));
        let results = race(&stores, |who, store| {
            let (k, fence) = (k.clone(), first.fence);
            async move {
                store
                    .take_over(
                        &k,
                        fence,
                        Duration::from_millis(1_000),
                        conformance::holder(who as u32),
                        None,
                    )
                    .await
            }
        })
        .await;
        let winners: Vec<_> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
        assert_eq!(winners.len(), 1, "round {round}: {results:?}");
        let winner = winners[0].clone();
        assert!(winner.fence > first.fence && winner.attempt == 2);
        for r in &results {
            match r {
                Ok(_) => {}
                Err(StoreError::Fenced { current, .. }) => assert_eq!(*current, winner.fence),
                Err(other) => panic!("round {round}: unexpected {other}"),
            }
        }
        // Lease and retention (0) over: the record counts as absent, and
        // racing claims replace it exactly once.
        clock.advance(Duration::from_millis(1_001));
        let outcomes = race(&stores, |who, store| {
            let request = request(&k, 2, 60_000, 60_000, who as u32);
            async move { store.claim(request).await.expect("claim") }
        })
        .await;
        let claimed: Vec<_> = outcomes
            .into_iter()
            .filter_map(|o| match o {
                ClaimOutcome::Claimed(c) => Some(c),
                ClaimOutcome::Existing(_) => None,
            })
            .collect();
        assert_eq!(claimed.len(), 1, "round {round}: {claimed:?}");
        assert!(claimed[0].fence > winner.fence && claimed[0].attempt == 1);
    }
    drop(stores);
    drop_schema(&url, &target.schema).await;
}

/// Concurrent claims under an epoch race a membership change (the fast
/// claim's `FOR SHARE` against the upsert's row lock): each either wins or
/// is refused with the new epoch, never an error or a deadlock, and once
/// the change has returned, no claim under the old epoch wins.
#[tokio::test]
async fn claims_racing_a_membership_change_never_win_after_it() {
    let Some(url) = postgres_test_url("claims_racing_a_membership_change_never_win_after_it")
    else {
        return;
    };
    let target = fresh(&url);
    let store = Arc::new(
        PostgresStore::open(target.clone(), StoreOptions::default())
            .await
            .expect("open"),
    );
    let old = store
        .join_membership("g", &["a".to_string(), "b".to_string()])
        .await
        .expect("join");
    let barrier = Arc::new(Barrier::new(9));
    let mut claims = Vec::new();
    for n in 0..8u32 {
        let (store, barrier, token) = (store.clone(), barrier.clone(), old.token());
        claims.push(tokio::spawn(async move {
            barrier.wait().await;
            let mut req = request(&conformance::key(n), 1, 60_000, 60_000, n);
            req.ownership = Some(token);
            store.claim(req).await
        }));
    }
    barrier.wait().await;
    let new = store
        .join_membership("g", &["b".to_string(), "c".to_string()])
        .await
        .expect("change");
    assert!(new.epoch > old.epoch);
    for (n, claim) in claims.into_iter().enumerate() {
        match claim.await.expect("task") {
            Ok(ClaimOutcome::Claimed(_)) => {
                assert!(
                    store
                        .get(&conformance::key(n as u32))
                        .await
                        .expect("get")
                        .is_some()
                );
            }
            Err(StoreError::StaleEpoch { current, .. }) => assert_eq!(current, new.epoch),
            other => panic!("claim {n}: {other:?}"),
        }
    }
    // After the change returned, the old epoch never wins.
    for n in 100..104u32 {
        let mut req = request(&conformance::key(n), 1, 60_000, 60_000, n);
        req.ownership = Some(old.token());
        assert!(matches!(
            store.claim(req).await,
            Err(StoreError::StaleEpoch { .. })
        ));
        assert_eq!(store.get(&conformance::key(n)).await.expect("get"), None);
    }
    drop(store);
    drop_schema(&url, &target.schema).await;
}

/// What the server refuses as data (SQLSTATE class 22, data exception, or
/// 23, integrity constraint violation) is a refusal of the request, never
/// an outage to wait out, and the server's own message reaches the caller
/// (not tokio-postgres's bare "db error"). Checks added behind idem's back
/// make the server refuse a claim each way.
#[tokio::test]
async fn data_the_server_refuses_is_a_refusal_with_its_message() {
    let Some(url) = postgres_test_url("data_the_server_refuses_is_a_refusal_with_its_message")
    else {
        return;
    };
    let target = fresh(&url);
    let store = PostgresStore::open(target.clone(), StoreOptions::default())
        .await
        .expect("open");
    let client = raw(&url).await;
    client
        .batch_execute(&format!(
            "ALTER TABLE \"{schema}\".records ADD CONSTRAINT no_poison CHECK (partition <> 'poison');
             ALTER TABLE \"{schema}\".records ADD CONSTRAINT numeric_when_asked
                 CHECK (partition NOT LIKE 'n:%' OR substr(partition, 3)::int > 0);",
            schema = target.schema
        ))
        .await
        .expect("add the checks");
    for (n, partition, code, said) in [
        (
            1,
            "poison",
            "23514",
            "violates check constraint \"no_poison\"",
        ),
        (
            2,
            "n:seven",
            "22P02",
            "invalid input syntax for type integer",
        ),
    ] {
        let k = RecordKey::new("refused", idem_core::Digest::of_bytes(&[n]));
        let mut r = request(&k, 1, 5_000, 60_000, 1);
        r.partition = partition.to_string();
        match store.claim(r).await {
            Err(e @ StoreError::DataRefused { .. }) => {
                assert!(!e.is_unavailable(), "{e}");
                assert_eq!(e.class(), idem_store::ErrorClass::Refused, "{e}");
                let text = e.to_string();
                assert!(text.contains(said) && text.contains(code), "{text}");
            }
            other => panic!("partition {partition}: expected DataRefused, got {other:?}"),
        }
        assert_eq!(store.get(&k).await.expect("get"), None);
    }
    drop_schema(&url, &target.schema).await;
}
