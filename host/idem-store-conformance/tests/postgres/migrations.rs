//! The PostgreSQL schema: migrations run once, a newer or foreign schema
//! refused untouched, an old schema upgraded in place, and the schema the
//! migrations build against its snapshot.

use super::*;

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
    // version 1 made them, and exactly the objects the later migrations
    // add (the gate's entries included), gone.
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
             ALTER TABLE \"{s}\".records DROP COLUMN operation, DROP COLUMN holder_token, \
               DROP COLUMN effect_atomic; \
             DROP TABLE \"{s}\".registrations; DROP TABLE \"{s}\".policy_components; \
             DROP TABLE \"{s}\".settings; DROP TABLE \"{s}\".gate_entries; \
             DROP FUNCTION \"{s}\".complete, \"{s}\".completed_under, \"{s}\".log_refused, \
               \"{s}\".checked_key, \"{s}\".locked_record, \"{s}\".counts_as_absent, \
               \"{s}\".idem_kept_fields; \
             DELETE FROM \"{s}\".idem_schema_migrations WHERE version >= 2"
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

/// A version-9 schema (before the lookup index) gains the index on open,
/// built over the records it holds, and a lookup by field uses it.
#[tokio::test]
async fn a_version_9_schema_gains_the_lookup_index() {
    let Some(url) = postgres_test_url("a_version_9_schema_gains_the_lookup_index") else {
        return;
    };
    let target = fresh(&url);
    let store = PostgresStore::open(target.clone(), StoreOptions::default())
        .await
        .expect("open");
    for n in 1..=3 {
        store
            .claim(request(&conformance::key(n), 1, 60_000, 60_000, 1))
            .await
            .expect("claim");
    }
    drop(store);
    let s = &target.schema;
    let client = raw(&url).await;
    client
        .batch_execute(&format!(
            "DROP INDEX \"{s}\".records_by_field; DROP FUNCTION \"{s}\".idem_kept_fields; \
             DELETE FROM \"{s}\".idem_schema_migrations WHERE version >= 10"
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
    let k = conformance::key(2);
    let found = store
        .list(idem_store::ListFilter {
            fields: vec![("key".into(), k.digest.to_string())],
            ..Default::default()
        })
        .await
        .expect("list");
    assert_eq!(
        found
            .iter()
            .map(|v| v.record.key.clone())
            .collect::<Vec<_>>(),
        [k]
    );
    // The index serves the lookup's condition (the planner is told to
    // prefer it: on three records it would rather scan).
    client
        .batch_execute("SET enable_seqscan = off")
        .await
        .expect("set");
    let plan: Vec<String> = client
        .query(
            &format!(
                "EXPLAIN SELECT 1 FROM \"{s}\".records r WHERE r.operation LIKE '{{%' \
                 AND \"{s}\".idem_kept_fields(r.operation) @> '{{\"key\":\"x\"}}'::jsonb"
            ),
            &[],
        )
        .await
        .expect("explain")
        .iter()
        .map(|row| row.get(0))
        .collect();
    // A scan that calls the function in parallel workers would fail (its
    // exception block starts a subtransaction, which a worker may not):
    // the function is not parallel safe, so no plan does.
    client
        .batch_execute(
            "SET enable_seqscan = on; SET enable_bitmapscan = off; SET enable_indexscan = off; \
             SET max_parallel_workers_per_gather = 2; SET parallel_setup_cost = 0; \
             SET parallel_tuple_cost = 0; SET min_parallel_table_scan_size = 0",
        )
        .await
        .expect("set");
    let scanned: i64 = client
        .query_one(
            &format!(
                "SELECT count(*) FROM \"{s}\".records r WHERE r.operation LIKE '{{%' \
                 AND \"{s}\".idem_kept_fields(r.operation) @> '{{\"key\":\"x\"}}'::jsonb"
            ),
            &[],
        )
        .await
        .expect("a scan calling the function")
        .get(0);
    drop(store);
    drop_schema(&url, &target.schema).await;
    assert_eq!(scanned, 0);
    assert!(
        plan.iter().any(|line| line.contains("records_by_field")),
        "{plan:#?}"
    );
}

/// The objects of a schema, in a form that compares across builds and
/// schema names (the name itself reads `{s}`): columns, constraints of
/// tables and domains, indexes, sequences, domains, functions (their
/// signatures and settings) and the migration history.
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
        "SELECT 'function ' || p.proname || '(' || pg_get_function_arguments(p.oid) || ') ' \
           || pg_get_function_result(p.oid) || ' ' || l.lanname || ' ' || p.provolatile::text \
           || COALESCE(' ' || array_to_string(p.proconfig, ' '), '') \
         FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace \
         JOIN pg_language l ON l.oid = p.prolang WHERE n.nspname = $1 ORDER BY p.proname",
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
