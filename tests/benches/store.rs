//! Durable begin+complete through the engine on SQLite, against the floor: a
//! raw rusqlite transaction pair doing the same writes on the same schema
//! with the same durability (WAL, synchronous=FULL), measured side by side in
//! one run, with 1, 8 and 32 concurrent callers.
//!
//! With `IDEM_TEST_POSTGRES_URL` set, the same for PostgreSQL: the engine
//! against raw `INSERT … ON CONFLICT` + `UPDATE` statements on the same
//! server, one connection per caller.
//!
//! Then the attempt log's cost: the same engine with the log on and off
//! (`StoreOptions::attempt_log`), interleaved.
//!
//! `cargo bench -p idem-tests --bench store [-- SECTION...]`: every section,
//! or only those named: `floor`, `group`, `log` (SQLite), `pg-log`,
//! `pg-group`, `pg-floor` (PostgreSQL); `grouped` (named only: 32 grouped
//! SQLite callers alone, for a profiler); `ceiling` (named only: the same
//! callers on the in-memory store); `pg-grouped` (named only: 32 grouped
//! PostgreSQL callers alone).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use idem::core::{Operation, OperationLimits};
use idem::engine::{Begin, Engine, EngineOptions};
use idem::store::{MemoryStore, Outcome, SqliteOptions, SqliteStore, StoreOptions};
use idem_tests::load;

/// Fresh operations: every begin claims a new key.
fn op(n: u64) -> Operation {
    let json = format!(
        r#"{{"kind":"charge","tenant":"acme","fields":{{"customer":"c{}","billing_period":"2026-11","invoice_id":"i{n}","amount":"100","currency":"EUR"}}}}"#,
        n % 1000
    );
    Operation::from_json(&json, &OperationLimits::default()).unwrap()
}

/// The store's record table as the store lays it out (in claim order, a
/// unique key index) with its two indexes (retention, last update: a
/// completion moves both), for the raw floor; the attempt log is not in the
/// floor (its cost is measured on its own, `log`).
const SCHEMA: &str = "
    PRAGMA journal_mode = WAL;
    CREATE TABLE fence_seq (id INTEGER PRIMARY KEY CHECK (id = 1), last INTEGER NOT NULL);
    INSERT INTO fence_seq (id, last) VALUES (1, 0);
    CREATE TABLE records (
        namespace TEXT NOT NULL, key BLOB NOT NULL, policy_digest TEXT NOT NULL, fingerprint BLOB NOT NULL,
        partition TEXT NOT NULL, state TEXT NOT NULL, fence INTEGER NOT NULL, lease_until INTEGER NOT NULL,
        attempts INTEGER NOT NULL, created INTEGER NOT NULL, updated INTEGER NOT NULL, retention_ms INTEGER NOT NULL,
        retain_until INTEGER NOT NULL, outcome_status INTEGER, outcome_body BLOB, outcome_error TEXT,
        holder_run_id TEXT, holder_trigger TEXT, holder_attempt INTEGER, holder_host TEXT NOT NULL,
        holder_pid INTEGER NOT NULL);
    CREATE UNIQUE INDEX records_by_key ON records (namespace, key);
    CREATE INDEX records_retain_until ON records (retain_until);
    CREATE INDEX records_updated ON records (updated);";

fn raw_connection(path: &std::path::Path) -> rusqlite::Connection {
    let c = rusqlite::Connection::open(path).unwrap();
    c.busy_timeout(Duration::from_secs(30)).unwrap();
    c.pragma_update(None, "synchronous", "FULL").unwrap();
    c
}

/// The floor: claim (fence + insert) and complete (conditional update), two
/// durable transactions, the same writes the store makes.
fn raw_begin_complete(c: &mut rusqlite::Connection, n: u64) {
    let key = idem::core::Digest::of_bytes(&n.to_be_bytes()).0;
    let now = 1_800_000_000_000i64 + n as i64;
    let tx = c
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .unwrap();
    let fence: i64 = tx
        .prepare_cached("UPDATE fence_seq SET last = last + 1 WHERE id = 1 RETURNING last")
        .unwrap()
        .query_row([], |r| r.get(0))
        .unwrap();
    tx.prepare_cached(
        "INSERT INTO records VALUES ('billing', ?1, 'sha256:x', ?1, 'c1', 'in-progress', ?2, ?3, 1, ?4, ?4, 86400000, ?3,
         NULL, NULL, NULL, 'run', 'scheduled', 1, 'host', 1)",
    )
    .unwrap()
    .execute(rusqlite::params![&key[..], fence, now + 300_000, now])
    .unwrap();
    tx.commit().unwrap();
    let tx = c
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .unwrap();
    let changed = tx
        .prepare_cached(
            "UPDATE records SET state = 'completed', outcome_status = 0, outcome_body = ?1, updated = ?2, retain_until = ?2 + retention_ms
             WHERE namespace = 'billing' AND key = ?3 AND fence = ?4 AND state = 'in-progress'",
        )
        .unwrap()
        .execute(rusqlite::params![&b"receipt"[..], now, &key[..], fence])
        .unwrap();
    assert_eq!(changed, 1);
    tx.commit().unwrap();
}

/// Operations per second for `callers` concurrent callers doing `per_caller`
/// begin+complete each through the engine.
fn engine_rate(callers: u64, per_caller: u64, rt: &tokio::runtime::Runtime) -> f64 {
    engine_rate_logged(callers, per_caller, true, rt)
}

/// [`engine_rate`] with the attempt log on or off.
fn engine_rate_logged(
    callers: u64,
    per_caller: u64,
    attempt_log: bool,
    rt: &tokio::runtime::Runtime,
) -> f64 {
    engine_rate_with(callers, per_caller, attempt_log, true, rt)
}

/// [`engine_rate`] with the attempt log and group commit on or off.
fn engine_rate_with(
    callers: u64,
    per_caller: u64,
    attempt_log: bool,
    group_commit: bool,
    rt: &tokio::runtime::Runtime,
) -> f64 {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(
        &dir.path().join("idem.db"),
        SqliteOptions::default(),
        StoreOptions {
            attempt_log,
            ..StoreOptions::default()
        },
    )
    .unwrap();
    let engine = Arc::new(Engine::new(
        load("billing-charge"),
        store.into(),
        grouping(group_commit),
    ));
    rt.block_on(drive(engine, callers, per_caller))
}

/// Engine options with group commit on (the default) or off.
fn grouping(on: bool) -> EngineOptions {
    grouping_in_flight(on, None)
}

/// [`grouping`] with `in_flight` store calls of a kind at once (the
/// default when `None`).
fn grouping_in_flight(on: bool, in_flight: Option<usize>) -> EngineOptions {
    let mut options = EngineOptions::default();
    options.group_commit.enabled = on;
    if let Some(n) = in_flight {
        options.group_commit.max_in_flight = Some(n);
    }
    options
}

/// The batched floor: one thread claiming `batch` fresh keys in one
/// transaction, then completing them in one more: the writes group commit
/// makes for `batch` waiting callers, without an engine.
fn raw_batched_rate(total: u64, batch: u64) -> f64 {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("raw.db");
    let mut c = raw_connection(&path);
    c.execute_batch(SCHEMA).unwrap();
    let start = Instant::now();
    let mut n = 0u64;
    while n < total {
        let ns: Vec<u64> = (n..(n + batch).min(total)).collect();
        n += ns.len() as u64;
        let tx = c
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .unwrap();
        let mut fences = Vec::with_capacity(ns.len());
        for &n in &ns {
            let key = idem::core::Digest::of_bytes(&n.to_be_bytes()).0;
            let now = 1_800_000_000_000i64 + n as i64;
            let fence: i64 = tx
                .prepare_cached("UPDATE fence_seq SET last = last + 1 WHERE id = 1 RETURNING last")
                .unwrap()
                .query_row([], |r| r.get(0))
                .unwrap();
            tx.prepare_cached(
                "INSERT INTO records VALUES ('billing', ?1, 'sha256:x', ?1, 'c1', 'in-progress', ?2, ?3, 1, ?4, ?4, 86400000, ?3,
                 NULL, NULL, NULL, 'run', 'scheduled', 1, 'host', 1)",
            )
            .unwrap()
            .execute(rusqlite::params![&key[..], fence, now + 300_000, now])
            .unwrap();
            fences.push((key, fence, now));
        }
        tx.commit().unwrap();
        let tx = c
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .unwrap();
        for (key, fence, now) in fences {
            let changed = tx
                .prepare_cached(
                    "UPDATE records SET state = 'completed', outcome_status = 0, outcome_body = ?1, updated = ?2, retain_until = ?2 + retention_ms
                     WHERE namespace = 'billing' AND key = ?3 AND fence = ?4 AND state = 'in-progress'",
                )
                .unwrap()
                .execute(rusqlite::params![&b"receipt"[..], now, &key[..], fence])
                .unwrap();
            assert_eq!(changed, 1);
        }
        tx.commit().unwrap();
    }
    total as f64 / start.elapsed().as_secs_f64()
}

/// `callers` concurrent tasks doing `per_caller` fresh begin+complete each;
/// operations per second.
async fn drive(engine: Arc<Engine>, callers: u64, per_caller: u64) -> f64 {
    let next = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..callers {
        let (engine, next) = (engine.clone(), next.clone());
        tasks.spawn(async move {
            for _ in 0..per_caller {
                let n = next.fetch_add(1, Ordering::Relaxed);
                match engine.begin(&op(n)).await.unwrap() {
                    Begin::Execute(e) => e
                        .complete(Outcome::new(0, b"receipt".to_vec()))
                        .await
                        .unwrap(),
                    other => panic!("expected a fresh claim: {other:?}"),
                }
            }
        });
    }
    while let Some(r) = tasks.join_next().await {
        r.unwrap();
    }
    (callers * per_caller) as f64 / start.elapsed().as_secs_f64()
}

/// The same for the raw floor: one connection per caller (thread).
fn raw_rate(callers: u64, per_caller: u64) -> f64 {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("raw.db");
    let setup = raw_connection(&path);
    setup.execute_batch(SCHEMA).unwrap();
    let mode: String = setup
        .pragma_query_value(None, "journal_mode", |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    drop(setup);
    let next = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let threads: Vec<_> = (0..callers)
        .map(|_| {
            let (path, next) = (path.clone(), next.clone());
            std::thread::spawn(move || {
                let mut c = raw_connection(&path);
                for _ in 0..per_caller {
                    raw_begin_complete(&mut c, next.fetch_add(1, Ordering::Relaxed));
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    (callers * per_caller) as f64 / start.elapsed().as_secs_f64()
}

/// The engine on PostgreSQL, in a schema of its own. Without TLS, like the
/// floor's connections (`NoTls`): the store's default `sslmode=prefer`
/// would encrypt against a server that offers TLS (Debian's does, with its
/// snakeoil certificate), and the engine would pay a handshake per pooled
/// connection and the encryption of every message, which the floor does
/// not: a difference of transport, not of the engine.
fn engine_rate_pg(
    url: &str,
    schema: &str,
    callers: u64,
    per_caller: u64,
    rt: &tokio::runtime::Runtime,
) -> f64 {
    engine_rate_pg_logged(url, schema, callers, per_caller, true, rt)
}

/// [`engine_rate_pg`] with the attempt log on or off.
fn engine_rate_pg_logged(
    url: &str,
    schema: &str,
    callers: u64,
    per_caller: u64,
    attempt_log: bool,
    rt: &tokio::runtime::Runtime,
) -> f64 {
    engine_rate_pg_with(url, schema, callers, per_caller, attempt_log, true, rt)
}

/// [`engine_rate_pg`] with the attempt log and group commit on or off.
fn engine_rate_pg_with(
    url: &str,
    schema: &str,
    callers: u64,
    per_caller: u64,
    attempt_log: bool,
    group_commit: bool,
    rt: &tokio::runtime::Runtime,
) -> f64 {
    let options = grouping(group_commit);
    engine_rate_pg_options(url, schema, callers, per_caller, attempt_log, options, rt)
}

/// [`engine_rate_pg`] with the attempt log on or off and these engine
/// options.
fn engine_rate_pg_options(
    url: &str,
    schema: &str,
    callers: u64,
    per_caller: u64,
    attempt_log: bool,
    engine_options: EngineOptions,
    rt: &tokio::runtime::Runtime,
) -> f64 {
    rt.block_on(async {
        let url = format!("{url}?idem_schema={schema}&idem_pool_size=40&sslmode=disable");
        let store = idem::store::open(
            &url,
            StoreOptions {
                attempt_log,
                ..StoreOptions::default()
            },
        )
        .await
        .unwrap();
        let engine = Arc::new(Engine::new(load("billing-charge"), store, engine_options));
        drive(engine, callers, per_caller).await
    })
}

/// The PostgreSQL floor: the claim as one `INSERT … ON CONFLICT DO NOTHING
/// RETURNING` drawing the fence from a sequence, the completion as one
/// conditional `UPDATE`, each its own autocommit statement, on the store's
/// record table and its two indexes (as the SQLite floor).
fn raw_rate_pg(
    url: &str,
    schema: &str,
    callers: u64,
    per_caller: u64,
    rt: &tokio::runtime::Runtime,
) -> f64 {
    rt.block_on(async {
        let connect = || async {
            let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.unwrap();
            tokio::spawn(conn);
            client
        };
        let setup = connect().await;
        setup
            .batch_execute(&format!(
                "DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema};
                 CREATE SEQUENCE {schema}.fence_seq;
                 CREATE TABLE {schema}.records (namespace TEXT NOT NULL, key BYTEA NOT NULL, policy_digest TEXT NOT NULL,
                   fingerprint BYTEA NOT NULL, partition TEXT NOT NULL, state TEXT NOT NULL, fence BIGINT NOT NULL,
                   lease_until BIGINT NOT NULL, attempts INT NOT NULL, created BIGINT NOT NULL, updated BIGINT NOT NULL,
                   retention_ms BIGINT NOT NULL, retain_until BIGINT NOT NULL, outcome_status INT, outcome_body BYTEA,
                   outcome_error TEXT, holder_run_id TEXT, holder_trigger TEXT, holder_attempt INT, holder_host TEXT NOT NULL,
                   holder_pid INT NOT NULL, PRIMARY KEY (namespace, key));
                 CREATE INDEX ON {schema}.records (retain_until);
                 CREATE INDEX ON {schema}.records (updated);"
            ))
            .await
            .unwrap();
        let next = Arc::new(AtomicU64::new(0));
        let start = Instant::now();
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..callers {
            let client = connect().await;
            let (next, schema) = (next.clone(), schema.to_string());
            tasks.spawn(async move {
                let claim = client
                    .prepare(&format!(
                        "INSERT INTO {schema}.records SELECT 'billing', $1, 'sha256:x', $1, 'c1', 'in-progress', nextval('{schema}.fence_seq'),
                         $2::bigint + 300000, 1, $2::bigint, $2::bigint, 86400000, $2::bigint + 86400000, NULL, NULL, NULL, 'run', 'scheduled', 1, 'host', 1
                         ON CONFLICT DO NOTHING RETURNING fence"
                    ))
                    .await
                    .unwrap();
                let complete = client
                    .prepare(&format!(
                        "UPDATE {schema}.records SET state = 'completed', outcome_status = 0, outcome_body = $1, updated = $2,
                         retain_until = $2 + retention_ms WHERE namespace = 'billing' AND key = $3 AND fence = $4 AND state = 'in-progress'"
                    ))
                    .await
                    .unwrap();
                for _ in 0..per_caller {
                    let n = next.fetch_add(1, Ordering::Relaxed);
                    let key = idem::core::Digest::of_bytes(&n.to_be_bytes()).0.to_vec();
                    let now = 1_800_000_000_000i64 + n as i64;
                    let row = client.query_one(&claim, &[&key, &now]).await.unwrap();
                    let fence: i64 = row.get(0);
                    let changed = client.execute(&complete, &[&b"receipt".to_vec(), &now, &key, &fence]).await.unwrap();
                    assert_eq!(changed, 1);
                }
            });
        }
        while let Some(r) = tasks.join_next().await {
            r.unwrap();
        }
        let rate = (callers * per_caller) as f64 / start.elapsed().as_secs_f64();
        setup.batch_execute(&format!("DROP SCHEMA {schema} CASCADE")).await.unwrap();
        rate
    })
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn main() {
    // `cargo test --benches` runs benches once in test mode: keep that short.
    let quick = std::env::args().any(|a| a == "--test" || a == "--list");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let total: u64 = if quick { 32 } else { 600 };
    let rounds = if quick { 1 } else { 5 };
    let chosen: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let wants = |section: &str| chosen.is_empty() || chosen.iter().any(|c| c == section);
    if wants("floor") {
        println!(
            "durable begin+complete on SQLite (WAL, synchronous=FULL), medians of {rounds} rounds, {total} ops each"
        );
        println!(
            "{:>8} {:>14} {:>14} {:>8}",
            "callers", "engine ops/s", "floor ops/s", "ratio"
        );
        for callers in [1u64, 8, 32] {
            let per = (total / callers).max(1);
            // Interleave engine and floor rounds so both see the same machine.
            let mut e = Vec::new();
            let mut f = Vec::new();
            for _ in 0..rounds {
                e.push(engine_rate(callers, per, &rt));
                f.push(raw_rate(callers, per));
            }
            let (e, f) = (median(e), median(f));
            println!("{callers:>8} {e:>14.0} {f:>14.0} {:>7.2}x", e / f);
        }
    }
    if wants("group") {
        println!(
            "\ngroup commit on SQLite: 32 callers with it, against 1 caller, 32 callers without, and a raw loop committing 32 claims (then their 32 completions) per transaction; medians of {rounds} rounds"
        );
        {
            let mut one = Vec::new();
            let mut on = Vec::new();
            let mut off = Vec::new();
            let mut raw = Vec::new();
            for _ in 0..rounds {
                one.push(engine_rate_with(1, total, true, true, &rt));
                on.push(engine_rate_with(
                    32,
                    (4 * total / 32).max(1),
                    true,
                    true,
                    &rt,
                ));
                off.push(engine_rate_with(
                    32,
                    (4 * total / 32).max(1),
                    true,
                    false,
                    &rt,
                ));
                raw.push(raw_batched_rate(4 * total, 32));
            }
            let (one, on, off, raw) = (median(one), median(on), median(off), median(raw));
            println!(
                "  1 caller {one:.0} ops/s; 32 callers {on:.0} ops/s with group commit, {off:.0} without; raw 32 per transaction {raw:.0} ops/s"
            );
            println!(
                "  32 grouped / 1 caller {:.2}x (target >= 10x); / 32 ungrouped {:.2}x; / raw batched {:.2}x (target >= 0.5x)",
                on / one,
                on / off,
                on / raw
            );
        }
    }
    // Not in the default set: 32 grouped callers alone, long enough to
    // profile (`perf record … --bench grouped`) without the other phases.
    if chosen.iter().any(|c| c == "grouped") {
        let ops = if quick { 64 } else { 32 * 1_000 };
        let rate = engine_rate_with(32, ops / 32, true, true, &rt);
        println!("\n32 grouped callers alone, {ops} ops: {rate:.0} ops/s");
    }
    // Not in the default set: the same 32 callers on the in-memory store,
    // which writes nothing durable: what the engine itself costs (policy
    // evaluation, operation parsing, scheduling) on this machine, the
    // ceiling any durable store's grouped rate stays under.
    if chosen.iter().any(|c| c == "ceiling") {
        let ops = if quick { 64 } else { 32 * 1_000 };
        let engine = Arc::new(Engine::new(
            load("billing-charge"),
            MemoryStore::new(StoreOptions::default()).into(),
            grouping(true),
        ));
        let rate = rt.block_on(drive(engine, 32, ops / 32));
        println!("\n32 callers on the in-memory store, {ops} ops: {rate:.0} ops/s");
    }
    if wants("log") {
        println!(
            "\nthe attempt log's cost on SQLite: begin+complete with the log / without, medians of {rounds} rounds"
        );
        println!(
            "{:>8} {:>14} {:>14} {:>8}",
            "callers", "log ops/s", "no-log ops/s", "ratio"
        );
        for callers in [1u64, 8] {
            let per = (total / callers).max(1);
            let mut on = Vec::new();
            let mut off = Vec::new();
            for _ in 0..rounds {
                on.push(engine_rate_logged(callers, per, true, &rt));
                off.push(engine_rate_logged(callers, per, false, &rt));
            }
            let (on, off) = (median(on), median(off));
            println!("{callers:>8} {on:>14.0} {off:>14.0} {:>7.2}x", on / off);
        }
    }
    if !["pg-log", "pg-group", "pg-grouped", "pg-floor"]
        .iter()
        .any(|s| wants(s))
    {
        return;
    }
    let Ok(url) = std::env::var("IDEM_TEST_POSTGRES_URL") else {
        println!("PostgreSQL: skipped (set IDEM_TEST_POSTGRES_URL to measure it)");
        return;
    };
    if wants("pg-log") {
        println!(
            "\nthe attempt log's cost on PostgreSQL: with the log / without, medians of {rounds} rounds"
        );
        println!(
            "{:>8} {:>14} {:>14} {:>8}",
            "callers", "log ops/s", "no-log ops/s", "ratio"
        );
        for callers in [1u64, 8] {
            let per = (total / callers).max(1);
            let mut on = Vec::new();
            let mut off = Vec::new();
            for round in 0..rounds {
                for (log, rates) in [(true, &mut on), (false, &mut off)] {
                    let schema = format!(
                        "idem_bench_log_{}_{callers}_{round}_{log}",
                        std::process::id()
                    );
                    rates.push(engine_rate_pg_logged(&url, &schema, callers, per, log, &rt));
                    drop_schema(&url, &schema, &rt);
                }
            }
            let (on, off) = (median(on), median(off));
            println!("{callers:>8} {on:>14.0} {off:>14.0} {:>7.2}x", on / off);
        }
    }
    if wants("pg-group") {
        println!(
            "\ngroup commit on PostgreSQL: 32 callers with it, against 1 caller and 32 callers without; medians of {rounds} rounds"
        );
        {
            // Grouped with 1, 4 and 8 store calls of a kind in flight, and not.
            let settings: [(u64, Option<usize>); 5] = [
                (1, Some(1)),
                (32, Some(1)),
                (32, Some(4)),
                (32, Some(8)),
                (32, None),
            ];
            let mut rates: Vec<Vec<f64>> = vec![Vec::new(); settings.len()];
            for round in 0..rounds {
                for (i, (callers, in_flight)) in settings.iter().enumerate() {
                    let schema = format!("idem_bench_gc_{}_{i}_{round}", std::process::id());
                    let per = if *callers == 1 {
                        total
                    } else {
                        (4 * total / 32).max(1)
                    };
                    let options = grouping_in_flight(in_flight.is_some(), *in_flight);
                    rates[i].push(engine_rate_pg_options(
                        &url, &schema, *callers, per, true, options, &rt,
                    ));
                    drop_schema(&url, &schema, &rt);
                }
            }
            let r: Vec<f64> = rates.into_iter().map(median).collect();
            let (one, off) = (r[0], r[4]);
            println!(
                "  1 caller {one:.0} ops/s; 32 callers: without group commit {off:.0} ops/s; grouped with 1 call in flight {:.0}, 4 {:.0}, 8 {:.0}",
                r[1], r[2], r[3]
            );
            println!(
                "  32 callers / 1 caller: without {:.2}x; grouped 1/4/8 in flight {:.2}x / {:.2}x / {:.2}x (target >= 3x); grouped / without {:.2}x / {:.2}x / {:.2}x",
                off / one,
                r[1] / one,
                r[2] / one,
                r[3] / one,
                r[1] / off,
                r[2] / off,
                r[3] / off
            );
        }
    }
    // Not in the default set: 32 grouped PostgreSQL callers alone, long
    // enough to profile (`perf record -a`: the server's processes too).
    if chosen.iter().any(|c| c == "pg-grouped") {
        let ops = if quick { 64 } else { 32 * 500 };
        let schema = format!("idem_bench_grouped_{}", std::process::id());
        let options = grouping_in_flight(true, None);
        let rate = engine_rate_pg_options(&url, &schema, 32, ops / 32, true, options, &rt);
        drop_schema(&url, &schema, &rt);
        println!("\n32 grouped PostgreSQL callers alone, {ops} ops: {rate:.0} ops/s");
    }
    if wants("pg-floor") {
        println!(
            "\nbegin+complete on PostgreSQL ({url}), medians of {rounds} rounds, {total} ops each"
        );
        println!(
            "{:>8} {:>14} {:>14} {:>8}",
            "callers", "engine ops/s", "floor ops/s", "ratio"
        );
        for callers in [1u64, 8, 32] {
            let per = (total / callers).max(1);
            let mut e = Vec::new();
            let mut f = Vec::new();
            for round in 0..rounds {
                let schema = format!("idem_bench_{}_{callers}_{round}", std::process::id());
                e.push(engine_rate_pg(&url, &schema, callers, per, &rt));
                drop_schema(&url, &schema, &rt);
                f.push(raw_rate_pg(
                    &url,
                    &format!("{schema}_raw"),
                    callers,
                    per,
                    &rt,
                ));
            }
            let (e, f) = (median(e), median(f));
            println!("{callers:>8} {e:>14.0} {f:>14.0} {:>7.2}x", e / f);
        }
    }
}

fn drop_schema(url: &str, schema: &str, rt: &tokio::runtime::Runtime) {
    rt.block_on(async {
        let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(conn);
        client
            .batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
            .await
            .unwrap();
    })
}
