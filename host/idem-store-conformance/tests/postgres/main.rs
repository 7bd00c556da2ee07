//! PostgreSQL-specific tests: URLs and connection errors, migrations,
//! TLS, the database clock, and connections racing on one key. The
//! conformance suite itself runs in `conformance/main.rs`.
//!
//! Every test that needs a database reads `IDEM_TEST_POSTGRES_URL` through
//! [`conformance::postgres_test_url`]: without it, the test says it was
//! skipped and passes, except under `CI=true`, where it fails.

mod claims;
mod migrations;

use std::sync::Arc;
use std::time::Duration;

use idem_store::{
    ClaimOutcome, ConnectErrorKind, ManualClock, MemoryStore, Ownership, PostgresStore,
    PostgresUrl, RecordKey, Records, StoreClock, StoreError, StoreOptions, StoreUrl, Writes,
};
use idem_store_conformance::{self as conformance, fresh_schema, postgres_test_url, request};
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
    .expect_err("an error");
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
