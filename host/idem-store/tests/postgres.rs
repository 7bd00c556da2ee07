//! PostgreSQL-specific tests: URLs and connection errors, migrations,
//! TLS, the database clock, and connections racing on one key. The
//! conformance suite itself runs in `conformance.rs`.
//!
//! Every test that needs a database reads `IDEM_TEST_POSTGRES_URL` through
//! [`conformance::postgres_test_url`]: without it, the test says it was
//! skipped and passes, except under `CI=true`, where it fails.

use std::sync::Arc;
use std::time::Duration;

use idem_store::conformance::{self, fresh_schema, postgres_test_url, request};
use idem_store::{
    ClaimOutcome, ConnectErrorKind, ManualClock, MemoryStore, PostgresStore, PostgresUrl,
    RecordKey, Store, StoreClock, StoreError, StoreOptions, StoreUrl,
};
use tokio::sync::Barrier;

/// The test URL with a fresh schema.
fn fresh(url: &str) -> PostgresUrl {
    let base: PostgresUrl = url.parse().expect("a postgres URL");
    base.with_schema(&fresh_schema()).expect("a schema")
}

/// A raw client for poking at the database behind idem's back. Plain TCP:
/// the test URL must not demand TLS.
async fn raw(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("a raw connection to the test database");
    tokio::spawn(connection);
    client
}

/// Drops a schema left by a test (the conformance fixtures drop their own).
async fn drop_schema(url: &str, schema: &str) {
    raw(url)
        .await
        .batch_execute(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
        .await
        .expect("drop the test schema");
}

fn manual_options(clock: &ManualClock) -> StoreOptions {
    StoreOptions {
        clock: clock.store_clock(),
        ..StoreOptions::default()
    }
}

fn connect_error(result: Result<PostgresStore, StoreError>) -> (ConnectErrorKind, String) {
    match result {
        Err(err @ StoreError::Connect { kind, .. }) => (kind, err.to_string()),
        Err(other) => panic!("expected a connection error, got {other}"),
        Ok(_) => panic!("expected a connection error, got a store"),
    }
}

/// Runs `call` for every store at once (each task waits at a barrier
/// first), passing the store's index; the results, in store order.
async fn race<T, F, Fut>(stores: &[Arc<PostgresStore>], call: F) -> Vec<T>
where
    F: Fn(usize, Arc<PostgresStore>) -> Fut,
    Fut: std::future::Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    let barrier = Arc::new(Barrier::new(stores.len()));
    let racers: Vec<_> = stores
        .iter()
        .enumerate()
        .map(|(who, store)| {
            let (barrier, run) = (barrier.clone(), call(who, store.clone()));
            tokio::spawn(async move {
                barrier.wait().await;
                run.await
            })
        })
        .collect();
    let mut results = Vec::with_capacity(racers.len());
    for racer in racers {
        results.push(racer.await.expect("racer"));
    }
    results
}

#[tokio::test]
async fn postgres_urls_parse_through_store_url() {
    let parsed: StoreUrl = "postgresql://u:pw@db/app?idem_schema=billing"
        .parse()
        .expect("a postgres URL");
    let StoreUrl::Postgres(url) = parsed else {
        panic!("not a postgres URL")
    };
    assert_eq!(url.schema, "billing");
    assert_eq!(
        url.redacted(),
        "postgresql://u:***@db/app?idem_schema=billing"
    );
    let err = "postgres://u:pw@db/app?idem_schema=Robert');DROP"
        .parse::<StoreUrl>()
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("idem_schema") && !err.contains(":pw@"),
        "{err}"
    );
}

/// Needs no database: nothing listens on port 1.
#[tokio::test]
async fn a_refused_connection_names_the_url_without_the_password() {
    let result = PostgresStore::connect(
        "postgres://idem:hunter2@127.0.0.1:1/test?connect_timeout=5",
        StoreOptions::default(),
    )
    .await;
    let (kind, text) = connect_error(result);
    assert_eq!(kind, ConnectErrorKind::Unreachable, "{text}");
    assert!(
        text.contains("postgres://idem:***@127.0.0.1:1/test"),
        "{text}"
    );
    assert!(!text.contains("hunter2"), "{text}");
    // The same through `open`, as the CLI calls it.
    let err = idem_store::open(
        "postgres://idem:hunter2@127.0.0.1:1/test",
        StoreOptions::default(),
    )
    .await
    .err()
    .expect("an error");
    assert!(!err.to_string().contains("hunter2"), "{err}");
}

#[tokio::test]
async fn an_unknown_role_or_database_is_a_typed_error() {
    let Some(url) = postgres_test_url("an_unknown_role_or_database_is_a_typed_error") else {
        return;
    };
    let config: tokio_postgres::Config = url.parse().expect("a client URL");
    let host = match &config.get_hosts()[0] {
        tokio_postgres::config::Host::Tcp(h) => h.clone(),
        tokio_postgres::config::Host::Unix(p) => p.display().to_string(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let user = config.get_user().unwrap_or("postgres");
    let (kind, text) = connect_error(
        PostgresStore::connect(
            &format!("postgres://{user}@{host}:{port}/idem_no_such_database"),
            StoreOptions::default(),
        )
        .await,
    );
    assert_eq!(kind, ConnectErrorKind::NoSuchDatabase, "{text}");
    assert!(text.contains("idem_no_such_database"), "{text}");
    let (kind, text) = connect_error(
        PostgresStore::connect(
            &format!("postgres://idem_no_such_role:secret@{host}:{port}/test"),
            StoreOptions::default(),
        )
        .await,
    );
    assert_eq!(kind, ConnectErrorKind::Auth, "{text}");
    assert!(!text.contains("secret"), "{text}");
}

#[tokio::test]
async fn migrations_run_once_and_a_newer_schema_is_refused() {
    let Some(url) = postgres_test_url("migrations_run_once_and_a_newer_schema_is_refused") else {
        return;
    };
    let target = fresh(&url);
    // Several pools race to create the same new schema: all succeed.
    let opens: Vec<_> = (0..6)
        .map(|_| {
            let target = target.clone();
            tokio::spawn(async move { PostgresStore::open(target, StoreOptions::default()).await })
        })
        .collect();
    let mut stores = Vec::new();
    for open in opens {
        stores.push(open.await.expect("task").expect("open"));
    }
    let store = &stores[0];
    assert_eq!(
        store.schema_version().await.expect("version"),
        idem_store::POSTGRES_SCHEMA_VERSION
    );
    assert_eq!(
        store.migrate().await.expect("migrate again"),
        idem_store::POSTGRES_SCHEMA_VERSION
    );
    let client = raw(&url).await;
    let rows = client
        .query(
            &format!(
                "SELECT version FROM \"{}\".idem_schema_migrations",
                target.schema
            ),
            &[],
        )
        .await
        .expect("history");
    assert_eq!(
        rows.len() as i64,
        idem_store::POSTGRES_SCHEMA_VERSION,
        "migrated once"
    );
    // The `migrate` entry point of the CLI.
    let target_url = format!(
        "{url}{}idem_schema={}",
        if url.contains('?') { '&' } else { '?' },
        target.schema
    );
    assert_eq!(
        idem_store::migrate(&target_url).await.expect("migrate"),
        idem_store::POSTGRES_SCHEMA_VERSION
    );

    client
        .execute(
            &format!(
                "INSERT INTO \"{}\".idem_schema_migrations (version) VALUES ({})",
                target.schema,
                idem_store::POSTGRES_SCHEMA_VERSION + 1
            ),
            &[],
        )
        .await
        .expect("bump");
    match PostgresStore::open(target.clone(), StoreOptions::default()).await {
        Err(
            err @ StoreError::DatabaseSchemaTooNew {
                found, supported, ..
            },
        ) if found == idem_store::POSTGRES_SCHEMA_VERSION + 1
            && supported == idem_store::POSTGRES_SCHEMA_VERSION =>
        {
            let text = err.to_string();
            assert!(
                text.contains("upgrade idem") && text.contains(&target.schema),
                "{text}"
            );
        }
        Err(other) => panic!("expected DatabaseSchemaTooNew, got {other}"),
        Ok(_) => panic!("expected DatabaseSchemaTooNew, got a store"),
    }
    drop(stores);
    drop_schema(&url, &target.schema).await;
}

#[tokio::test]
async fn another_applications_schema_is_refused_untouched() {
    let Some(url) = postgres_test_url("another_applications_schema_is_refused_untouched") else {
        return;
    };
    let target = fresh(&url);
    let client = raw(&url).await;
    client
        .batch_execute(&format!(
            "CREATE SCHEMA \"{0}\"; CREATE TABLE \"{0}\".records (id int); INSERT INTO \"{0}\".records VALUES (1);",
            target.schema
        ))
        .await
        .expect("a foreign schema");
    let (kind, text) =
        connect_error(PostgresStore::open(target.clone(), StoreOptions::default()).await);
    assert_eq!(kind, ConnectErrorKind::ForeignSchema, "{text}");
    let tables: i64 = client
        .query_one(
            "SELECT count(*) FROM pg_tables WHERE schemaname = $1",
            &[&target.schema],
        )
        .await
        .expect("count")
        .get(0);
    assert_eq!(tables, 1, "nothing was created in the foreign schema");
    drop_schema(&url, &target.schema).await;
}

#[tokio::test]
async fn schemas_keep_services_apart() {
    let Some(url) = postgres_test_url("schemas_keep_services_apart") else {
        return;
    };
    let (a_url, b_url) = (fresh(&url), fresh(&url));
    let a = PostgresStore::open(a_url.clone(), StoreOptions::default())
        .await
        .expect("a");
    let b = PostgresStore::open(b_url.clone(), StoreOptions::default())
        .await
        .expect("b");
    let k = conformance::key(1);
    assert!(matches!(
        a.claim(request(&k, 1, 60_000, 60_000, 1))
            .await
            .expect("claim a"),
        ClaimOutcome::Claimed(_)
    ));
    assert!(
        matches!(
            b.claim(request(&k, 1, 60_000, 60_000, 1))
                .await
                .expect("claim b"),
            ClaimOutcome::Claimed(_)
        ),
        "the same key in another schema is another record"
    );
    assert_eq!(a.schema(), a_url.schema);
    assert_eq!(b.schema(), b_url.schema);
    drop((a, b));
    drop_schema(&url, &a_url.schema).await;
    drop_schema(&url, &b_url.schema).await;
}

/// `sslmode` behaves as in libpq: `disable` is plain, `require` encrypts
/// (without checking the server's certificate), `verify-full` refuses a
/// certificate no trusted root signed (the test server's is self-signed),
/// and `verify-ca` accepts it once `sslrootcert` trusts it.
/// A server without TLS must refuse `require`.
#[tokio::test]
async fn sslmode_disable_require_and_verify_full() {
    let Some(url) = postgres_test_url("sslmode_disable_require_and_verify_full") else {
        return;
    };
    let target = fresh(&url);
    let with = |mode: &str| -> PostgresUrl {
        let sep = if url.contains('?') { '&' } else { '?' };
        format!("{url}{sep}sslmode={mode}&idem_schema={}", target.schema)
            .parse()
            .expect("a URL")
    };
    let plain = PostgresStore::open(with("disable"), StoreOptions::default())
        .await
        .expect("sslmode=disable");
    assert!(!plain.tls_in_use().await.expect("tls"));
    let server_ssl: String = raw(&url)
        .await
        .query_one("SHOW ssl", &[])
        .await
        .expect("SHOW ssl")
        .get(0);
    let required = PostgresStore::open(with("require"), StoreOptions::default()).await;
    if server_ssl == "on" {
        let store = required.expect("sslmode=require against a self-signed server");
        assert!(store.tls_in_use().await.expect("tls"), "require encrypts");
        let store = PostgresStore::open(with("prefer"), StoreOptions::default())
            .await
            .expect("sslmode=prefer");
        assert!(
            store.tls_in_use().await.expect("tls"),
            "prefer encrypts when it can"
        );
        let (kind, text) =
            connect_error(PostgresStore::open(with("verify-full"), StoreOptions::default()).await);
        assert_eq!(kind, ConnectErrorKind::Tls, "{text}");
        // Trusting the server's own certificate as the root, verification
        // succeeds: `verify-ca` checks the chain (not the host name, as in
        // libpq), so it holds for any self-signed server certificate.
        let cert_file: String = raw(&url)
            .await
            .query_one("SHOW ssl_cert_file", &[])
            .await
            .expect("SHOW ssl_cert_file")
            .get(0);
        if std::fs::File::open(&cert_file).is_ok() {
            let verified = PostgresStore::open(
                with(&format!("verify-ca&sslrootcert={cert_file}")),
                StoreOptions::default(),
            )
            .await
            .unwrap_or_else(|e| panic!("verify-ca trusting {cert_file}: {e}"));
            assert!(
                verified.tls_in_use().await.expect("tls"),
                "verify-ca encrypts"
            );
        } else {
            use std::io::Write;
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED the verified-TLS part: cannot read the server's certificate {cert_file}"
            );
        }
    } else {
        let (kind, text) = connect_error(required);
        assert_eq!(kind, ConnectErrorKind::Tls, "{text}");
    }
    drop(plain);
    drop_schema(&url, &target.schema).await;
}

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

/// A schema at version 1 (records only, with table checks, as the first
/// idem left it) is upgraded in place on open: its records survive,
/// memberships, epochs and job leases work, and the records' checks hold as
/// domains (no table check left).
#[tokio::test]
async fn a_version_1_schema_is_upgraded_in_place() {
    let Some(url) = postgres_test_url("a_version_1_schema_is_upgraded_in_place") else {
        return;
    };
    let target = fresh(&url);
    let store = PostgresStore::open(target.clone(), StoreOptions::default())
        .await
        .expect("open");
    let k = conformance::key(1);
    let claim = match store
        .claim(request(&k, 1, 60_000, 60_000, 1))
        .await
        .expect("claim")
    {
        ClaimOutcome::Claimed(claim) => claim,
        other => panic!("expected a claim, got {other:?}"),
    };
    drop(store);
    // Back to version 1: migration 3's domains back to table checks as
    // version 1 made them, and exactly the objects migrations 2, 4, 5 and
    // 6 add, gone.
    let s = &target.schema;
    let client = raw(&url).await;
    client
        .batch_execute(&format!(
            "ALTER TABLE \"{s}\".records \
               ALTER COLUMN key TYPE bytea, ALTER COLUMN fingerprint TYPE bytea, \
               ALTER COLUMN state TYPE text, ALTER COLUMN fence TYPE bigint, \
               ADD CONSTRAINT records_key_check CHECK (octet_length(key) = 32), \
               ADD CONSTRAINT records_fingerprint_check CHECK (octet_length(fingerprint) = 32), \
               ADD CONSTRAINT records_state_check CHECK (state IN ('in-progress', 'completed', \
                 'failed-retryable', 'failed-permanent', 'outcome-unknown')), \
               ADD CONSTRAINT records_fence_check CHECK (fence > 0); \
             DROP DOMAIN \"{s}\".digest; DROP DOMAIN \"{s}\".record_state; DROP DOMAIN \"{s}\".fence; \
             DROP TABLE \"{s}\".memberships; DROP TABLE \"{s}\".job_leases; \
             DROP SEQUENCE \"{s}\".epoch_seq; DROP TABLE \"{s}\".attempts; \
             ALTER TABLE \"{s}\".records DROP COLUMN operation, DROP COLUMN holder_token; \
             DROP TABLE \"{s}\".registrations; DROP TABLE \"{s}\".policy_components; \
             DROP TABLE \"{s}\".settings; \
             DELETE FROM \"{s}\".idem_schema_migrations WHERE version IN (2, 3, 4, 5, 6)"
        ))
        .await
        .expect("downgrade");
    let store = PostgresStore::open(target.clone(), StoreOptions::default())
        .await
        .expect("reopen");
    assert_eq!(
        store.schema_version().await.expect("version"),
        idem_store::POSTGRES_SCHEMA_VERSION
    );
    let table_checks: i64 = client
        .query_one(
            &format!(
                "SELECT count(*) FROM pg_constraint WHERE conrelid = '\"{s}\".records'::regclass \
                 AND contype = 'c'"
            ),
            &[],
        )
        .await
        .expect("constraints")
        .get(0);
    assert_eq!(table_checks, 0, "the checks moved to domains");
    // Each check still refuses a bad row written behind idem's back.
    for (column, value) in [
        ("key", "'\\x00'::bytea"),
        ("fingerprint", "'\\x00'::bytea"),
        ("state", "'bogus'"),
        ("fence", "0"),
    ] {
        let err = client
            .batch_execute(&format!("UPDATE \"{s}\".records SET {column} = {value}"))
            .await
            .expect_err(column);
        assert_eq!(
            err.code(),
            Some(&tokio_postgres::error::SqlState::CHECK_VIOLATION),
            "{column}: {err}"
        );
    }
    let record = store
        .get(&k)
        .await
        .expect("get")
        .expect("the record survived");
    assert_eq!(record.record.fence, claim.fence);
    let m = store
        .join_membership("nightly", &["a".to_string()])
        .await
        .expect("join");
    assert!(m.epoch > 0);
    assert!(matches!(
        store
            .acquire_job_lease("nightly", "me", Duration::from_secs(60))
            .await
            .expect("acquire"),
        idem_store::JobLeaseAcquire::Acquired(lease) if lease.fence > claim.fence
    ));
    drop(store);
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
    let store: Arc<dyn Store> = Arc::new(
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

/// The objects of a schema, in a form that compares across builds and
/// schema names (the name itself reads `{s}`): columns, constraints of
/// tables and domains, indexes, sequences, domains and the migration
/// history.
async fn schema_of(url: &str, schema: &str) -> String {
    let client = raw(url).await;
    let queries = [
        "SELECT c.relname || '.' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod) \
           || CASE WHEN a.attnotnull THEN ' NOT NULL' ELSE '' END \
           || COALESCE(' DEFAULT ' || pg_get_expr(d.adbin, d.adrelid), '') \
         FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid \
         JOIN pg_namespace n ON n.oid = c.relnamespace \
         LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum \
         WHERE n.nspname = $1 AND c.relkind = 'r' AND a.attnum > 0 AND NOT a.attisdropped \
         ORDER BY c.relname, a.attnum",
        "SELECT COALESCE(c.relname, t.typname) || ' ' || con.conname || ' ' || pg_get_constraintdef(con.oid) \
         FROM pg_constraint con JOIN pg_namespace n ON n.oid = con.connamespace \
         LEFT JOIN pg_class c ON c.oid = con.conrelid LEFT JOIN pg_type t ON t.oid = con.contypid \
         WHERE n.nspname = $1 ORDER BY 1",
        "SELECT indexdef FROM pg_indexes WHERE schemaname = $1 ORDER BY indexname",
        "SELECT sequencename || ' ' || data_type::text || ' start ' || start_value || ' min ' || min_value \
           || ' max ' || max_value || ' by ' || increment_by || ' cycle ' || cycle \
         FROM pg_sequences WHERE schemaname = $1 ORDER BY sequencename",
        "SELECT t.typname || ' ' || format_type(t.typbasetype, t.typtypmod) \
         FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace \
         WHERE n.nspname = $1 AND t.typtype = 'd' ORDER BY t.typname",
    ];
    let mut out = String::new();
    for sql in queries {
        for row in client.query(sql, &[&schema]).await.expect(sql) {
            out.push_str(&row.get::<_, String>(0));
            out.push('\n');
        }
    }
    let versions = client
        .query(
            &format!("SELECT version FROM \"{schema}\".idem_schema_migrations ORDER BY version"),
            &[],
        )
        .await
        .expect("the migration history");
    for row in versions {
        out.push_str(&format!("migration {}\n", row.get::<_, i32>(0)));
    }
    out.replace(&format!("\"{schema}\""), "{s}")
        .replace(schema, "{s}")
}

/// Where the schema snapshot of the current version is kept: made by the
/// build that introduced that version (see `write_the_schema_snapshot`).
const POSTGRES_SNAPSHOT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/schema-postgres.txt"
);

/// The migration files build exactly the schema that the build which
/// introduced the current version built (the snapshot), so a schema that
/// build made opens as current and is never migrated again.
#[tokio::test]
async fn the_migrations_build_the_snapshotted_schema() {
    let Some(url) = postgres_test_url("the_migrations_build_the_snapshotted_schema") else {
        return;
    };
    let target = fresh(&url);
    drop(
        PostgresStore::open(target.clone(), StoreOptions::default())
            .await
            .expect("open"),
    );
    let found = schema_of(&url, &target.schema).await;
    drop_schema(&url, &target.schema).await;
    let expected = std::fs::read_to_string(POSTGRES_SNAPSHOT).expect("the snapshot");
    assert_eq!(found, expected);
    let newest = format!("migration {}\n", idem_store::POSTGRES_SCHEMA_VERSION);
    assert!(expected.ends_with(&newest));
}

/// Writes the snapshot from the schema `IDEM_SCHEMA_SNAPSHOT_FROM` names in
/// the test database: run once, against a schema made by the build that
/// introduced a new schema version. Ignored: it writes a fixture, it tests
/// nothing.
#[tokio::test]
#[ignore]
async fn write_the_schema_snapshot() {
    let url = std::env::var(conformance::POSTGRES_URL_ENV).expect("the test database");
    let from = std::env::var("IDEM_SCHEMA_SNAPSHOT_FROM").expect("IDEM_SCHEMA_SNAPSHOT_FROM");
    std::fs::write(POSTGRES_SNAPSHOT, schema_of(&url, &from).await).expect("write the snapshot");
}
