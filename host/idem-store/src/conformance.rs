//! The conformance suite every store must pass (feature `conformance`).
//!
//! Each check is a public async function taking a *factory*: a closure that
//! makes a fresh, empty store from [`StoreOptions`]. The suite passes in a
//! [`ManualClock`]'s store clock and advances it, so no check sleeps or
//! depends on timing. [`run_all`] runs every check; [`model::check`] runs
//! the model-based property test.
//!
//! A check panics (with the store's description) when the store misbehaves.
//!
//! ```no_run
//! use idem_store::conformance;
//! # async fn demo() {
//! conformance::run_all(&conformance::memory_factory()).await;
//! conformance::run_all(&conformance::sqlite_factory(Default::default())).await;
//! # }
//! // The model check runs its own runtime: call it outside one.
//! conformance::model::check(conformance::memory_factory(), 64);
//! ```

pub mod model;

use std::any::Any;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use crate::{
    Claim, ClaimOutcome, ClaimRequest, Digest, Ending, Existing, Finish, Holder, JobLease,
    JobLeaseAcquire, ListFilter, ManualClock, Membership, MemoryStore, Outcome, OwnershipToken,
    PostgresStore, PostgresUrl, RecordKey, RecordState, RecordView, SqliteOptions, SqliteStore,
    Store, StoreError, StoreOptions, Synchronous, TRUNCATION_MARK,
};

/// A boxed, sendable future.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// Opens the same data again through a new store (a new connection).
pub type Reopen = Box<dyn Fn() -> BoxFuture<Arc<dyn Store>> + Send + Sync>;

/// A fresh store made by a factory.
pub struct Fixture {
    /// The store, empty.
    pub store: Arc<dyn Store>,
    /// For persistent stores: opens the same data again, with the same
    /// options. `None` for stores whose data dies with them.
    pub reopen: Option<Reopen>,
    /// Whatever must outlive the store (e.g. its temporary directory).
    pub guard: Option<Box<dyn Any + Send + Sync>>,
}

/// The clock every check starts at (ms since the epoch).
pub const START_MS: u64 = 1_700_000_000_000;

/// The policy digest the checks claim under.
pub const POLICY: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

/// A factory of in-memory stores.
pub fn memory_factory() -> impl Fn(StoreOptions) -> BoxFuture<Fixture> + Send + Sync + 'static {
    |options| {
        Box::pin(async move {
            let store: Arc<dyn Store> = Arc::new(MemoryStore::new(options));
            Fixture {
                store,
                reopen: None,
                guard: None,
            }
        })
    }
}

/// A factory of SQLite stores, each in a file of its own temporary
/// directory; `reopen` opens the same file through a new connection.
pub fn sqlite_factory(
    sqlite: SqliteOptions,
) -> impl Fn(StoreOptions) -> BoxFuture<Fixture> + Send + Sync + 'static {
    move |options| {
        Box::pin(async move {
            let dir = tempfile::tempdir().expect("a temporary directory");
            let path = dir.path().join("idem.db");
            let open = {
                let path = path.clone();
                move |options: StoreOptions| -> BoxFuture<Arc<dyn Store>> {
                    let path = path.clone();
                    Box::pin(async move {
                        let store = tokio::task::spawn_blocking(move || {
                            SqliteStore::open(&path, sqlite, options)
                        })
                        .await
                        .expect("the open task")
                        .expect("opening the SQLite store");
                        Arc::new(store) as Arc<dyn Store>
                    })
                }
            };
            let store = open(options.clone()).await;
            let reopen: Reopen = Box::new(move || open(options.clone()));
            Fixture {
                store,
                reopen: Some(reopen),
                guard: Some(Box::new(dir)),
            }
        })
    }
}

/// A SQLite factory with `synchronous=NORMAL`: the same code paths, fewer
/// fsyncs, for the many short-lived stores of the property test.
pub fn sqlite_fast_factory() -> impl Fn(StoreOptions) -> BoxFuture<Fixture> + Send + Sync + 'static
{
    sqlite_factory(SqliteOptions {
        synchronous: Synchronous::Normal,
        ..SqliteOptions::default()
    })
}

/// The environment variable naming the PostgreSQL database the tests run
/// against, e.g. `postgres://postgres@127.0.0.1:5432/test`.
pub const POSTGRES_URL_ENV: &str = "IDEM_TEST_POSTGRES_URL";

/// The one rule for PostgreSQL tests: the URL from [`POSTGRES_URL_ENV`].
///
/// - Set: returned; the test then fails if the database is unreachable
///   (opening the store panics), never skips.
/// - Unset (or empty) with `CI=true` (or `1`): panics. CI must run the
///   PostgreSQL tests, never skip them silently.
/// - Unset elsewhere: prints that `test` was skipped, and returns `None`
///   (the test returns and passes).
pub fn postgres_test_url(test: &str) -> Option<String> {
    let url = std::env::var(POSTGRES_URL_ENV)
        .ok()
        .filter(|u| !u.trim().is_empty());
    if url.is_none() {
        let ci = std::env::var("CI").is_ok_and(|v| v.eq_ignore_ascii_case("true") || v == "1");
        assert!(
            !ci,
            "{test}: {POSTGRES_URL_ENV} is not set, and CI=true: CI must run the PostgreSQL tests (start PostgreSQL and set {POSTGRES_URL_ENV}=postgres://USER@HOST/DB)"
        );
        // Straight to the stderr handle, not `eprintln!`, which the test
        // harness captures (and hides) for a passing test.
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED {test}: {POSTGRES_URL_ENV} is not set (no PostgreSQL to test against)"
        );
    }
    url
}

/// A fresh schema name for a test: `idem_test_<pid>_<n>_<time>`.
pub fn fresh_schema() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("idem_test_{}_{n}_{nanos:x}", std::process::id())
}

/// Drops a test's schema when the fixture goes: from a thread and runtime
/// of its own, through a connection of its own, since the test's runtime
/// may be the one dropping the fixture. A failure only warns: the schema is
/// then left behind (named `idem_test_*`).
struct DropSchema(PostgresUrl);

impl Drop for DropSchema {
    fn drop(&mut self) {
        let url = self.0.clone();
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?;
            runtime.block_on(async {
                let store = PostgresStore::open(url, StoreOptions::default())
                    .await
                    .map_err(|e| e.to_string())?;
                store.drop_schema().await.map_err(|e| e.to_string())
            })
        })
        .join();
        match dropped {
            Ok(Ok(())) => {}
            Ok(Err(e)) => eprintln!(
                "warning: could not drop test schema `{}`: {e}",
                self.0.schema
            ),
            Err(_) => eprintln!("warning: dropping test schema `{}` panicked", self.0.schema),
        }
    }
}

/// Drops the schema a PostgreSQL store URL names (its `idem_schema`), as a
/// fixture does when it goes: for tests whose stores another process (the
/// CLI) created. A URL that does not parse drops nothing.
pub fn drop_postgres_schema(store_url: &str) {
    if let Ok(url) = store_url.parse::<PostgresUrl>() {
        drop(DropSchema(url));
    }
}

/// A factory of PostgreSQL stores in the database `url` names, each in a
/// fresh schema ([`fresh_schema`]) dropped with the fixture; `reopen` opens
/// the same schema through a new pool. Panics when the database cannot be
/// opened (see [`postgres_test_url`]).
pub fn postgres_factory(
    url: String,
) -> impl Fn(StoreOptions) -> BoxFuture<Fixture> + Send + Sync + 'static {
    move |options| {
        let url = url.clone();
        Box::pin(async move {
            let base: PostgresUrl = url
                .parse()
                .unwrap_or_else(|e| panic!("{POSTGRES_URL_ENV}: {e}"));
            let url = base
                .with_schema(&fresh_schema())
                .expect("a valid schema name");
            let open = {
                let url = url.clone();
                move |options: StoreOptions| -> BoxFuture<Arc<dyn Store>> {
                    let url = url.clone();
                    Box::pin(async move {
                        let store = PostgresStore::open(url, options)
                            .await
                            .unwrap_or_else(|e| panic!("opening the PostgreSQL store: {e}"));
                        Arc::new(store) as Arc<dyn Store>
                    })
                }
            };
            let store = open(options.clone()).await;
            let reopen: Reopen = Box::new(move || open(options.clone()));
            Fixture {
                store,
                reopen: Some(reopen),
                guard: Some(Box::new(DropSchema(url))),
            }
        })
    }
}

/// Record key `n` in namespace `conformance`.
pub fn key(n: u32) -> RecordKey {
    RecordKey::new(
        "conformance",
        Digest::of_bytes(format!("key-{n}").as_bytes()),
    )
}

/// Fingerprint `n`.
pub fn fingerprint(n: u32) -> Digest {
    Digest::of_bytes(format!("fingerprint-{n}").as_bytes())
}

/// A claim request with a lease and a retention, by worker `who`.
pub fn request(
    key: &RecordKey,
    fp: u32,
    lease_ms: u64,
    retention_ms: u64,
    who: u32,
) -> ClaimRequest {
    ClaimRequest {
        key: key.clone(),
        policy_digest: POLICY.to_string(),
        fingerprint: fingerprint(fp),
        partition: "customer-1".to_string(),
        lease: Duration::from_millis(lease_ms),
        retention: Duration::from_millis(retention_ms),
        holder: holder(who),
        ownership: None,
    }
}

/// A holder named after worker `who`.
pub fn holder(who: u32) -> Holder {
    Holder {
        run_id: Some(format!("run-{who}")),
        trigger: Some("scheduled".to_string()),
        attempt: Some(1),
        host: "conformance-host".to_string(),
        pid: 1000 + who,
    }
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Builds a store on a manual clock at [`START_MS`].
async fn fixture<F, Fut>(factory: &F, max_outcome_bytes: usize) -> (Fixture, ManualClock)
where
    F: Fn(StoreOptions) -> Fut,
    Fut: Future<Output = Fixture>,
{
    let clock = ManualClock::new(START_MS);
    let fixture = factory(StoreOptions {
        clock: clock.store_clock(),
        max_outcome_bytes,
    })
    .await;
    (fixture, clock)
}

async fn claimed(store: &dyn Store, request: ClaimRequest) -> Claim {
    match store.claim(request).await {
        Ok(ClaimOutcome::Claimed(claim)) => claim,
        other => panic!("{}: expected Claimed, got {other:?}", store.describe()),
    }
}

async fn existing(store: &dyn Store, request: ClaimRequest) -> Existing {
    match store.claim(request).await {
        Ok(ClaimOutcome::Existing(existing)) => *existing,
        other => panic!("{}: expected Existing, got {other:?}", store.describe()),
    }
}

async fn view(store: &dyn Store, key: &RecordKey) -> RecordView {
    match store.get(key).await {
        Ok(Some(view)) => view,
        other => panic!("{}: expected record {key}, got {other:?}", store.describe()),
    }
}

fn assert_fenced<T: std::fmt::Debug>(result: Result<T, StoreError>, fence: u64, current: u64) {
    match result {
        Err(StoreError::Fenced {
            fence: f,
            current: c,
            ..
        }) if f == fence && c == current => {}
        other => panic!("expected Fenced {{ fence: {fence}, current: {current} }}, got {other:?}"),
    }
}

fn assert_not_in_progress<T: std::fmt::Debug>(result: Result<T, StoreError>, state: RecordState) {
    match result {
        Err(StoreError::NotInProgress { state: s, .. }) if s == state => {}
        other => panic!("expected NotInProgress ({state:?}), got {other:?}"),
    }
}

fn assert_not_eligible<T: std::fmt::Debug>(result: Result<T, StoreError>, state: RecordState) {
    match result {
        Err(StoreError::NotEligible { state: s, .. }) if s == state => {}
        other => panic!("expected NotEligible ({state:?}), got {other:?}"),
    }
}

fn assert_gone<T: std::fmt::Debug>(result: Result<T, StoreError>) {
    match result {
        Err(StoreError::Gone { .. }) => {}
        other => panic!("expected Gone, got {other:?}"),
    }
}

/// A claim inserts an in-progress record under a fresh fence; a duplicate
/// sees it, with store-clock age and lease and whether its fingerprint
/// matches; namespaces never collide.
pub async fn claim_and_duplicate<F, Fut>(factory: &F)
where
    F: Fn(StoreOptions) -> Fut,
    Fut: Future<Output = Fixture>,
{
    let (fx, clock) = fixture(factory, crate::DEFAULT_MAX_OUTCOME_BYTES).await;
    let store = fx.store.as_ref();
    let k = key(1);
    assert_eq!(store.get(&k).await.expect("get"), None);
    let claim = claimed(store, request(&k, 1, 5_000, 60_000, 1)).await;
    assert_eq!(claim.key, k);
    assert!(claim.fence > 0);
    assert_eq!(claim.attempt, 1);
    assert_eq!(claim.lease_until_ms, START_MS + 5_000);

    let v = view(store, &k).await;
    let r = &v.record;
    assert_eq!(r.state, RecordState::InProgress);
    assert_eq!(
        (r.fence, r.attempts, r.created_ms, r.updated_ms),
        (claim.fence, 1, START_MS, START_MS)
    );
    assert_eq!(
        (r.policy_digest.as_str(), r.partition.as_str()),
        (POLICY, "customer-1")
    );
    assert_eq!(r.fingerprint, fingerprint(1));
    assert_eq!(r.holder, holder(1));
    assert_eq!(r.outcome, None);
    assert!(r.retain_until_ms >= START_MS + 60_000);

    clock.advance(ms(1_200));
    let dup = existing(store, request(&k, 1, 5_000, 60_000, 2)).await;
    assert!(dup.fingerprint_matches);
    assert_eq!(dup.view.record.fence, claim.fence);
    assert_eq!(
        dup.view.record.holder,
        holder(1),
        "a duplicate does not change the holder"
    );
    assert_eq!(
        (dup.view.age_ms, dup.view.lease_remaining_ms),
        (1_200, 3_800)
    );
    assert_eq!(dup.view.now_ms, START_MS + 1_200);

    let other = existing(store, request(&k, 2, 5_000, 60_000, 3)).await;
    assert!(!other.fingerprint_matches);
    let ctx = other.duplicate_context(
        idem_core::Operation::from_json(
            r#"{"kind":"k","tenant":"t"}"#,
            &idem_core::OperationLimits::default(),
        )
        .expect("an operation"),
    );
    assert_eq!(
        (ctx.state, ctx.fingerprint_matches, ctx.attempts),
        (RecordState::InProgress, false, 1)
    );

    // The same digest in another namespace is another record.
    let elsewhere = RecordKey::new("other-namespace", k.key);
    let second = claimed(store, request(&elsewhere, 1, 5_000, 60_000, 4)).await;
    assert!(second.fence > claim.fence);
    assert_eq!(view(store, &k).await.record.fence, claim.fence);

    let mut bad = request(&key(2), 1, 5_000, 60_000, 1);
    bad.policy_digest = "md5:abc".to_string();
    assert!(matches!(
        store.claim(bad).await,
        Err(StoreError::InvalidRequest(_))
    ));
    assert_eq!(store.get(&key(2)).await.expect("get"), None);
}

/// A completed record is final: replayed to duplicates, never overwritten,
/// not even by its own fence.
pub async fn complete_then_replay<F, Fut>(factory: &F)
where
    F: Fn(StoreOptions) -> Fut,
    Fut: Future<Output = Fixture>,
{
    let (fx, clock) = fixture(factory, crate::DEFAULT_MAX_OUTCOME_BYTES).await;
    let store = fx.store.as_ref();
    let k = key(1);
    let claim = claimed(store, request(&k, 1, 5_000, 60_000, 1)).await;
    clock.advance(ms(300));
    store
        .complete(&k, claim.fence, Outcome::new(201, b"charged".to_vec()))
        .await
        .expect("complete");

    let dup = existing(store, request(&k, 1, 5_000, 60_000, 2)).await;
    let r = &dup.view.record;
    assert_eq!(r.state, RecordState::Completed);
    assert_eq!(r.outcome, Some(Outcome::new(201, b"charged".to_vec())));
    assert_eq!(r.updated_ms, START_MS + 300);
    assert_eq!(
        dup.view.lease_remaining_ms, 0,
        "a completed record has no lease"
    );
    assert!(dup.fingerprint_matches);
    let summary = r
        .outcome
        .as_ref()
        .map(Outcome::summary)
        .expect("an outcome");
    assert_eq!((summary.status, summary.size), (201, 7));

    let before = view(store, &k).await.record;
    assert_not_in_progress(
        store
            .complete(&k, claim.fence, Outcome::new(500, b"again".to_vec()))
            .await,
        RecordState::Completed,
    );
    assert_not_in_progress(
        store
            .fail(&k, claim.fence, true, Outcome::error(1, "late"))
            .await,
        RecordState::Completed,
    );
    assert_not_in_progress(
        store.heartbeat(&k, claim.fence, ms(5_000)).await,
        RecordState::Completed,
    );
    assert_fenced(
        store
            .complete(&k, claim.fence + 1000, Outcome::new(500, Vec::new()))
            .await,
        claim.fence + 1000,
        claim.fence,
    );
    assert_eq!(
        view(store, &k).await.record,
        before,
        "a completed record never changes"
    );
}

/// A deposed holder's writes are fenced and change nothing.
pub async fn fenced_stale_writes<F, Fut>(factory: &F)
where
    F: Fn(StoreOptions) -> Fut,
    Fut: Future<Output = Fixture>,
{
    let (fx, clock) = fixture(factory, crate::DEFAULT_MAX_OUTCOME_BYTES).await;
    let store = fx.store.as_ref();
    let k = key(1);
    let a = claimed(store, request(&k, 1, 1_000, 60_000, 1)).await;
    clock.advance(ms(1_000));
    let b = store
        .take_over(&k, a.fence, ms(1_000), holder(2))
        .await
        .expect("take over an expired lease");
    assert!(b.fence > a.fence);

    let before = view(store, &k).await.record;
    assert_fenced(
        store
            .complete(&k, a.fence, Outcome::new(200, b"stale".to_vec()))
            .await,
        a.fence,
        b.fence,
    );
    assert_fenced(
        store
            .fail(&k, a.fence, false, Outcome::error(1, "stale"))
            .await,
        a.fence,
        b.fence,
    );
    assert_fenced(
        store.heartbeat(&k, a.fence, ms(60_000)).await,
        a.fence,
        b.fence,
    );
    assert_fenced(
        store.take_over(&k, a.fence, ms(1_000), holder(3)).await,
        a.fence,
        b.fence,
    );
    assert_fenced(store.mark_unknown(&k, a.fence).await, a.fence, b.fence);
    assert_eq!(
        view(store, &k).await.record,
        before,
        "fenced writes change nothing"
    );

    store
        .complete(&k, b.fence, Outcome::new(200, b"fresh".to_vec()))
        .await
        .expect("the current holder completes");
    assert_fenced(
        store
            .complete(&k, a.fence, Outcome::new(200, b"stale".to_vec()))
            .await,
        a.fence,
        b.fence,
    );
    assert_eq!(
        view(store, &k).await.record.outcome,
        Some(Outcome::new(200, b"fresh".to_vec()))
    );
}

/// Leases expire by the store clock: a take-over is refused while the lease
/// is live and allowed, under a higher fence, once it expired.
pub async fn lease_expiry_and_take_over<F, Fut>(factory: &F)
where
    F: Fn(StoreOptions) -> Fut,
    Fut: Future<Output = Fixture>,
{
    let (fx, clock) = fixture(factory, crate::DEFAULT_MAX_OUTCOME_BYTES).await;
    let store = fx.store.as_ref();
    let k = key(1);
    let a = claimed(store, request(&k, 1, 1_000, 60_000, 1)).await;
    assert_not_eligible(
        store.take_over(&k, a.fence, ms(1_000), holder(2)).await,
        RecordState::InProgress,
    );
    clock.advance(ms(999));
    assert_eq!(view(store, &k).await.lease_remaining_ms, 1);
    assert_not_eligible(
        store.take_over(&k, a.fence, ms(1_000), holder(2)).await,
        RecordState::InProgress,
    );
    clock.advance(ms(1));
    assert_eq!(
        view(store, &k).await.lease_remaining_ms,
        0,
        "expired exactly at lease_until"
    );
    assert_fenced(
        store.take_over(&k, a.fence + 1, ms(1_000), holder(2)).await,
        a.fence + 1,
        a.fence,
    );

    let b = store
        .take_over(&k, a.fence, ms(2_000), holder(2))
        .await
        .expect("take over");
    assert!(b.fence > a.fence);
    assert_eq!((b.attempt, b.lease_until_ms), (2, START_MS + 1_000 + 2_000));
    let r = view(store, &k).await.record;
    assert_eq!(
        (r.state, r.fence, r.attempts),
        (RecordState::InProgress, b.fence, 2)
    );
    assert_eq!(r.holder, holder(2));
    assert_eq!(
        r.created_ms, START_MS,
        "a take-over keeps the record's creation time"
    );

    // Only one of two racing take-overs of the same observation wins.
    assert_not_eligible(
        store.take_over(&k, b.fence, ms(1_000), holder(3)).await,
        RecordState::InProgress,
    );
    clock.advance(ms(2_000));
    let c = store
        .take_over(&k, b.fence, ms(1_000), holder(3))
        .await
        .expect("take over again");
    assert_fenced(
        store.take_over(&k, b.fence, ms(1_000), holder(4)).await,
        b.fence,
        c.fence,
    );
    assert_eq!(c.attempt, 3);
}

/// A holder whose lease expired but whom nobody took over still holds the
/// current fence, and may complete: the fence, not the lease, decides who
/// writes.
pub async fn expired_holder_may_still_write<F, Fut>(factory: &F)
where
    F: Fn(StoreOptions) -> Fut,
    Fut: Future<Output = Fixture>,
{
    let (fx, clock) = fixture(factory, crate::DEFAULT_MAX_OUTCOME_BYTES).await;
    let store = fx.store.as_ref();
    let k = key(1);
    let a = claimed(store, request(&k, 1, 1_000, 60_000, 1)).await;
    clock.advance(ms(5_000));
    let until = store
        .heartbeat(&k, a.fence, ms(1_000))
        .await
        .expect("heartbeat after expiry");
    assert_eq!(until, START_MS + 6_000);
    clock.advance(ms(5_000));
    store
        .complete(&k, a.fence, Outcome::new(0, Vec::new()))
        .await
        .expect("complete after expiry");
    assert_eq!(view(store, &k).await.record.state, RecordState::Completed);
}

/// Take-over is never allowed for a final record.
pub async fn take_over_refused_for_final<F, Fut>(factory: &F)
where
    F: Fn(StoreOptions) -> Fut,
    Fut: Future<Output = Fixture>,
{
    let (fx, clock) = fixture(factory, crate::DEFAULT_MAX_OUTCOME_BYTES).await;
    let store = fx.store.as_ref();
    let (k1, k2) = (key(1), key(2));
    let a = claimed(store, request(&k1, 1, 1_000, 60_000, 1)).await;
    store
        .complete(&k1, a.fence, Outcome::new(200, Vec::new()))
        .await
        .expect("complete");
    let b = claimed(store, request(&k2, 1, 1_000, 60_000, 1)).await;
    store
        .fail(&k2, b.fence, false, Outcome::error(2, "card declined"))
        .await
        .expect("fail permanently");
    clock.advance(ms(10_000));
    assert_not_eligible(
        store.take_over(&k1, a.fence, ms(1_000), holder(2)).await,
        RecordState::Completed,
    );
    assert_not_eligible(
        store.take_over(&k2, b.fence, ms(1_000), holder(2)).await,
        RecordState::FailedPermanent,
    );
    assert_not_eligible(
        store.mark_unknown(&k1, a.fence).await,
        RecordState::Completed,
    );
    assert_eq!(view(store, &k1).await.record.fence, a.fence);
    assert_eq!(
        view(store, &k2).await.record.state,
        RecordState::FailedPermanent
    );
}

/// A heartbeat extends the lease by the store clock; a deposed holder's
/// heartbeat is fenced.
pub async fn heartbeat_extends_and_is_fenced<F, Fut>(factory: &F)
where
    F: Fn(StoreOptions) -> Fut,
    Fut: Future<Output = Fixture>,
{
    let (fx, clock) = fixture(factory, crate::DEFAULT_MAX_OUTCOME_BYTES).await;
    let store = fx.store.as_ref();
    let k = key(1);
    let a = claimed(store, request(&k, 1, 1_000, 60_000, 1)).await;
    clock.advance(ms(800));
    let until = store
        .heartbeat(&k, a.fence, ms(1_000))
        .await
        .expect("heartbeat");
    assert_eq!(until, START_MS + 1_800);
    assert_eq!(view(store, &k).await.record.lease_until_ms, until);
    clock.advance(ms(500));
    assert_eq!(view(store, &k).await.lease_remaining_ms, 500);
    assert_not_eligible(
        store.take_over(&k, a.fence, ms(1_000), holder(2)).await,
        RecordState::InProgress,
    );
    clock.advance(ms(500));
    let b = store
        .take_over(&k, a.fence, ms(1_000), holder(2))
        .await
        .expect("take over");
    let before = view(store, &k).await.record;
    assert_fenced(
        store.heartbeat(&k, a.fence, ms(60_000)).await,
        a.fence,
        b.fence,
    );
    assert_eq!(view(store, &k).await.record, before);
}

/// A retryable failure may be taken over (attempts + 1); a permanent one
/// may not.
pub async fn fail_retryable_then_take_over<F, Fut>(factory: &F)
where
    F: Fn(StoreOptions) -> Fut,
    Fut: Future<Output = Fixture>,
{
    let (fx, _clock) = fixture(factory, crate::DEFAULT_MAX_OUTCOME_BYTES).await;
    let store = fx.store.as_ref();
    let k = key(1);
    let a = claimed(store, request(&k, 1, 60_000, 60_000, 1)).await;
    store
        .fail(&k, a.fence, true, Outcome::error(503, "gateway timeout"))
        .await
        .expect("fail");
    let dup = existing(store, request(&k, 1, 60_000, 60_000, 2)).await;
    assert_eq!(dup.view.record.state, RecordState::FailedRetryable);
    assert_eq!(
        dup.view.record.outcome,
        Some(Outcome::error(503, "gateway timeout"))
    );
    assert_not_in_progress(
        store
            .complete(&k, a.fence, Outcome::new(200, Vec::new()))
            .await,
        RecordState::FailedRetryable,
    );

    // No lease needs to expire: the failure ended the attempt.
    let b = store
        .take_over(&k, a.fence, ms(60_000), holder(2))
        .await
        .expect("take over a retryable failure");
    assert!(b.fence > a.fence);
    assert_eq!(b.attempt, 2);
    let r = view(store, &k).await.record;
    assert_eq!(
        (r.state, r.outcome.as_ref()),
        (RecordState::InProgress, None)
    );
    store
        .fail(&k, b.fence, false, Outcome::error(402, "declined"))
        .await
        .expect("fail permanently");
    assert_not_eligible(
        store.take_over(&k, b.fence, ms(60_000), holder(3)).await,
        RecordState::FailedPermanent,
    );
}

/// mark-unknown only after the lease expired, under the observed fence;
/// idempotent; the holder can no longer write; a take-over may follow.
pub async fn mark_unknown<F, Fut>(factory: &F)
where
    F: Fn(StoreOptions) -> Fut,
    Fut: Future<Output = Fixture>,
{
    let (fx, clock) = fixture(factory, crate::DEFAULT_MAX_OUTCOME_BYTES).await;
    let store = fx.store.as_ref();
    let k = key(1);
    let a = claimed(store, request(&k, 1, 1_000, 60_000, 1)).await;
    assert_not_eligible(
        store.mark_unknown(&k, a.fence).await,
        RecordState::InProgress,
    );
    clock.advance(ms(1_000));
    assert_fenced(
        store.mark_unknown(&k, a.fence + 1).await,
        a.fence + 1,
        a.fence,
    );
    store.mark_unknown(&k, a.fence).await.expect("mark unknown");
    store
        .mark_unknown(&k, a.fence)
        .await
        .expect("mark unknown again is a no-op");
    let r = view(store, &k).await.record;
    assert_eq!((r.state, r.fence), (RecordState::OutcomeUnknown, a.fence));
    assert_not_in_progress(
        store
            .complete(&k, a.fence, Outcome::new(200, Vec::new()))
            .await,
        RecordState::OutcomeUnknown,
    );
    assert_eq!(view(store, &k).await.record, r);
    let b = store
        .take_over(&k, a.fence, ms(1_000), holder(2))
        .await
        .expect("take over an unknown outcome");
    assert!(b.fence > a.fence);
    assert_gone(store.mark_unknown(&key(9), 1).await);
}

/// Records live until their retention passes (store clock), then count as
/// absent and are collected; a live lease is never collected.
pub async fn retention_and_gc<F, Fut>(factory: &F)
where
    F: Fn(StoreOptions) -> Fut,
    Fut: Future<Output = Fixture>,
{
    let (fx, clock) = fixture(factory, crate::DEFAULT_MAX_OUTCOME_BYTES).await;
    let store = fx.store.as_ref();
    let (k1, k2) = (key(1), key(2));
    let a = claimed(store, request(&k1, 1, 1_000, 10_000, 1)).await;
    clock.advance(ms(500));
    store
        .complete(&k1, a.fence, Outcome::new(200, Vec::new()))
        .await
        .expect("complete");
    assert_eq!(
        view(store, &k1).await.record.retain_until_ms,
        START_MS + 500 + 10_000
    );

    // An in-progress record with retention 0 lives as long as its lease.
    let b = claimed(store, request(&k2, 1, 20_000, 0, 2)).await;
    clock.advance(ms(10_000)); // now = retain_until of k1: kept until strictly past.
    assert_eq!(store.gc().await.expect("gc"), 0);
    assert!(store.get(&k1).await.expect("get").is_some());
    clock.advance(ms(1));
    assert_eq!(
        store.get(&k1).await.expect("get"),
        None,
        "past retention counts as absent"
    );
    assert_eq!(
        store.list(ListFilter::default()).await.expect("list").len(),
        1
    );
    assert_gone(store.take_over(&k1, a.fence, ms(1_000), holder(3)).await);
    assert_eq!(store.gc().await.expect("gc"), 1);
    assert_eq!(store.gc().await.expect("gc"), 0);
    assert_eq!(
        view(store, &k2).await.record.fence,
        b.fence,
        "a live lease is never collected"
    );

    // k2's lease ends at START + 20_500, now is START + 10_501.
    clock.advance(ms(9_999));
    assert_eq!(store.gc().await.expect("gc"), 0);
    clock.advance(ms(1));
    assert_eq!(
        store.gc().await.expect("gc"),
        1,
        "an expired lease past retention is collected"
    );
    assert_gone(
        store
            .complete(&k2, b.fence, Outcome::new(200, Vec::new()))
            .await,
    );

    // An expired record is replaced by a claim without waiting for gc.
    let c = claimed(store, request(&k1, 2, 1_000, 0, 4)).await;
    store
        .fail(&k1, c.fence, true, Outcome::error(1, "x"))
        .await
        .expect("fail");
    clock.advance(ms(1));
    let d = claimed(store, request(&k1, 3, 1_000, 0, 5)).await;
    assert!(d.fence > c.fence);
    assert_eq!(d.attempt, 1, "a replaced record starts over");
    assert_eq!(view(store, &k1).await.record.fingerprint, fingerprint(3));
}

/// `finish_many` answers each holder as `complete`/`fail` would, in order:
/// completions, retryable and permanent failures written; a deposed holder
/// fenced, a finished record not in progress, a missing one gone, an
/// oversized outcome refused; a key repeated in the batch finds what its
/// first entry wrote. Each write is conditional on its own fence.
pub async fn finish_many_is_finishes_in_order<F, Fut>(factory: &F)
where
    F: Fn(StoreOptions) -> Fut,
    Fut: Future<Output = Fixture>,
{
    let (fx, clock) = fixture(factory, 64).await;
    let store = fx.store.as_ref();
    let name = store.describe();
    assert!(
        store
            .finish_many(Vec::new())
            .await
            .expect("empty batch")
            .is_empty(),
        "{name}: an empty batch finishes nothing"
    );
    let held: Vec<Claim> = {
        let mut held = Vec::new();
        for n in 1..=5 {
            held.push(claimed(store, request(&key(n), 1, 1_000, 60_000, 1)).await);
        }
        held
    };
    // Key 4's holder is deposed: its lease lapses and a take-over follows.
    clock.advance(ms(2_000));
    let taker = store
        .take_over(&key(4), held[3].fence, ms(60_000), holder(2))
        .await
        .expect("take over key 4");
    // Key 5 is completed before the batch.
    store
        .complete(&key(5), held[4].fence, Outcome::new(0, b"first".to_vec()))
        .await
        .expect("complete key 5");
    let finish = |n: u32, fence: u64, ending: Ending, body: &[u8]| Finish {
        key: key(n),
        fence,
        ending,
        outcome: Outcome::new(0, body.to_vec()),
    };
    let batch = vec![
        finish(1, held[0].fence, Ending::Completed, b"one"),
        finish(2, held[1].fence, Ending::Failed { retryable: true }, b"two"),
        finish(
            3,
            held[2].fence,
            Ending::Failed { retryable: false },
            b"three",
        ),
        // The deposed holder, then the one that took over.
        finish(4, held[3].fence, Ending::Completed, b"stale"),
        finish(4, taker.fence, Ending::Completed, b"four"),
        finish(5, held[4].fence, Ending::Completed, b"again"),
        finish(6, 999_999, Ending::Completed, b"nobody"),
        // Key 1 again, after its completion earlier in this batch.
        finish(1, held[0].fence, Ending::Completed, b"twice"),
        finish(2, held[1].fence, Ending::Completed, &[b'x'; 65]),
    ];
    let mut out = store
        .finish_many(batch)
        .await
        .unwrap_or_else(|e| panic!("{name}: finish_many: {e}"))
        .into_iter();
    let mut next = |what: &str| {
        out.next()
            .unwrap_or_else(|| panic!("{name}: no result for {what}"))
    };
    for what in ["complete 1", "fail 2 retryable", "fail 3 permanent"] {
        next(what).unwrap_or_else(|e| panic!("{name}: {what}: {e}"));
    }
    assert_fenced(next("deposed holder of 4"), held[3].fence, taker.fence);
    next("taker of 4").unwrap_or_else(|e| panic!("{name}: taker of 4: {e}"));
    assert_not_in_progress(next("completed 5"), RecordState::Completed);
    assert_gone(next("no record 6"));
    assert_not_in_progress(next("1 again"), RecordState::Completed);
    match next("oversized outcome") {
        Err(StoreError::OutcomeTooLarge { .. }) => {}
        other => panic!("{name}: oversized outcome: expected OutcomeTooLarge, got {other:?}"),
    }
    assert!(out.next().is_none(), "{name}: one result per finish");

    // What the batch wrote is in the store, as single calls would leave it.
    for (n, state, body) in [
        (1, RecordState::Completed, &b"one"[..]),
        (2, RecordState::FailedRetryable, b"two"),
        (3, RecordState::FailedPermanent, b"three"),
        (4, RecordState::Completed, b"four"),
        (5, RecordState::Completed, b"first"),
    ] {
        let record = view(store, &key(n)).await.record;
        assert_eq!(
            (
                record.state,
                record.outcome.as_ref().map(|o| o.body.as_slice())
            ),
            (state, Some(body)),
            "{name}: key {n}"
        );
        assert_eq!(record.updated_ms, START_MS + 2_000, "{name}: key {n}");
    }
}

/// A batch of claims gets what the same claims one after the other would
/// have got, in order: fresh keys claimed under new fences (higher than any
/// before the batch, in an order of the store's choosing), a key
/// repeated in the batch finding its first occurrence's record, existing
/// records reported (with the fingerprint compared), a record past its
/// retention replaced, and a refused request (invalid, stale epoch)
/// refused alone. The claims are real: their holders complete them.
pub async fn claim_many_is_claims_in_order<F, Fut>(factory: &F)
where
    F: Fn(StoreOptions) -> Fut,
    Fut: Future<Output = Fixture>,
{
    let (fx, clock) = fixture(factory, crate::DEFAULT_MAX_OUTCOME_BYTES).await;
    let store = fx.store.as_ref();
    let name = store.describe();
    assert!(
        store
            .claim_many(Vec::new())
            .await
            .expect("empty batch")
            .is_empty(),
        "{name}: an empty batch claims nothing"
    );
    // Before: key 3 completed, key 5 failed with retention 0 (past it
    // once the clock moves), key 6 in progress under a live lease.
    let done = claimed(store, request(&key(3), 1, 1_000, 60_000, 1)).await;
    store
        .complete(&key(3), done.fence, Outcome::new(200, b"ok".to_vec()))
        .await
        .expect("complete");
    let dead = claimed(store, request(&key(5), 1, 1_000, 0, 1)).await;
    store
        .fail(&key(5), dead.fence, true, Outcome::error(1, "x"))
        .await
        .expect("fail");
    let running = claimed(store, request(&key(6), 1, 60_000, 60_000, 1)).await;
    let old = join(store, "batch", &["w-a"]).await;
    let new = join(store, "batch", &["w-b"]).await;
    clock.advance(ms(1));

    let invalid = ClaimRequest {
        policy_digest: "md5:nope".to_string(),
        ..request(&key(8), 1, 1_000, 60_000, 2)
    };
    let batch = vec![
        request(&key(1), 1, 10_000, 60_000, 2),
        request(&key(2), 1, 10_000, 60_000, 2),
        request(&key(1), 1, 10_000, 60_000, 3),
        request(&key(3), 1, 10_000, 60_000, 2),
        request(&key(3), 2, 10_000, 60_000, 2),
        request(&key(5), 3, 10_000, 60_000, 2),
        invalid,
        request(&key(6), 1, 10_000, 60_000, 2),
        owned(&key(7), 10_000, old.token()),
        request(&key(9), 1, 10_000, 60_000, 2),
    ];
    let mut out = store
        .claim_many(batch)
        .await
        .unwrap_or_else(|e| panic!("{name}: claim_many: {e}"))
        .into_iter();
    let mut next = |what: &str| {
        out.next()
            .unwrap_or_else(|| panic!("{name}: no outcome for {what}"))
    };
    let claim = |what: &str, r: Result<ClaimOutcome, StoreError>| match r {
        Ok(ClaimOutcome::Claimed(c)) => c,
        other => panic!("{name}: {what}: expected Claimed, got {other:?}"),
    };
    let existing = |what: &str, r: Result<ClaimOutcome, StoreError>| match r {
        Ok(ClaimOutcome::Existing(e)) => *e,
        other => panic!("{name}: {what}: expected Existing, got {other:?}"),
    };
    let k1 = claim("fresh key 1", next("key 1"));
    let k2 = claim("fresh key 2", next("key 2"));
    assert!(
        k1.fence > running.fence && k2.fence > running.fence && k1.fence != k2.fence,
        "{name}: new fences, higher than any before the batch"
    );
    let again = existing("key 1 again", next("key 1 again"));
    assert_eq!(
        (
            again.view.record.state,
            again.view.record.fence,
            again.fingerprint_matches
        ),
        (RecordState::InProgress, k1.fence, true),
        "{name}: a key repeated in a batch finds its first claim"
    );
    let replay = existing("completed key 3", next("key 3"));
    assert_eq!(
        (replay.view.record.state, replay.fingerprint_matches),
        (RecordState::Completed, true)
    );
    assert_eq!(
        replay
            .view
            .record
            .outcome
            .as_ref()
            .map(|o| o.body.as_slice()),
        Some(&b"ok"[..])
    );
    let conflict = existing("key 3, other fingerprint", next("key 3 again"));
    assert!(
        !conflict.fingerprint_matches,
        "{name}: fingerprint compared"
    );
    let replaced = claim("key 5 past retention", next("key 5"));
    assert!(replaced.fence > running.fence && replaced.attempt == 1);
    assert!(![k1.fence, k2.fence].contains(&replaced.fence));
    match next("invalid") {
        Err(StoreError::InvalidRequest(_)) => {}
        other => panic!("{name}: invalid request: expected InvalidRequest, got {other:?}"),
    }
    let busy = existing("key 6 in progress", next("key 6"));
    assert_eq!(
        (busy.view.record.state, busy.view.record.fence),
        (RecordState::InProgress, running.fence)
    );
    assert_stale(next("stale epoch"), old.epoch, new.epoch);
    let k9 = claim("fresh key 9 after refusals", next("key 9"));
    assert!(k9.fence > running.fence && ![k1.fence, k2.fence, replaced.fence].contains(&k9.fence));
    assert!(out.next().is_none(), "{name}: one outcome per request");

    // What the batch did is in the store, as single claims would leave it.
    for (k, c) in [
        (key(1), &k1),
        (key(2), &k2),
        (key(5), &replaced),
        (key(9), &k9),
    ] {
        let record = view(store, &k).await.record;
        assert_eq!(
            (record.state, record.fence, record.lease_until_ms),
            (RecordState::InProgress, c.fence, c.lease_until_ms),
            "{name}: {k}"
        );
    }
    assert_eq!(
        view(store, &key(5)).await.record.fingerprint,
        fingerprint(3)
    );
    for k in [key(7), key(8)] {
        assert_eq!(
            store.get(&k).await.expect("get"),
            None,
            "{name}: {k} refused, not written"
        );
    }
    store
        .complete(&key(1), k1.fence, Outcome::new(200, Vec::new()))
        .await
        .unwrap_or_else(|e| panic!("{name}: completing a batch claim: {e}"));
}

/// Fences strictly increase across keys, gc and (for persistent stores)
/// reopening.
pub async fn fence_monotonic_across_gc_and_reopen<F, Fut>(factory: &F)
where
    F: Fn(StoreOptions) -> Fut,
    Fut: Future<Output = Fixture>,
{
    let (fx, clock) = fixture(factory, crate::DEFAULT_MAX_OUTCOME_BYTES).await;
    let store = fx.store.clone();
    let mut last = 0;
    for n in 0..3 {
        let c = claimed(store.as_ref(), request(&key(n), 1, 1_000, 0, 1)).await;
        assert!(c.fence > last, "fence {} after {last}", c.fence);
        last = c.fence;
        store
            .complete(&key(n), c.fence, Outcome::new(0, Vec::new()))
            .await
            .expect("complete");
    }
    clock.advance(ms(1));
    assert_eq!(store.gc().await.expect("gc"), 3);
    let c = claimed(store.as_ref(), request(&key(0), 1, 1_000, 60_000, 1)).await;
    assert!(
        c.fence > last,
        "fence {} after gc, last was {last}",
        c.fence
    );
    last = c.fence;
    if let Some(reopen) = &fx.reopen {
        drop(store);
        let again = reopen().await;
        assert_eq!(
            view(again.as_ref(), &key(0)).await.record.fence,
            last,
            "records survive reopening"
        );
        let d = claimed(again.as_ref(), request(&key(7), 1, 1_000, 60_000, 1)).await;
        assert!(
            d.fence > last,
            "fence {} after reopen, last was {last}",
            d.fence
        );
    }
}

/// Outcome bodies over the limit are refused (nothing written, the claim
/// still held); long error text is cut and marked.
pub async fn outcome_size_cap<F, Fut>(factory: &F)
where
    F: Fn(StoreOptions) -> Fut,
    Fut: Future<Output = Fixture>,
{
    let (fx, _clock) = fixture(factory, 16).await;
    let store = fx.store.as_ref();
    let k = key(1);
    let a = claimed(store, request(&k, 1, 60_000, 60_000, 1)).await;
    match store
        .complete(&k, a.fence, Outcome::new(200, vec![7; 17]))
        .await
    {
        Err(StoreError::OutcomeTooLarge {
            size: 17,
            limit: 16,
            ..
        }) => {}
        other => panic!("expected OutcomeTooLarge, got {other:?}"),
    }
    assert!(matches!(
        store
            .fail(
                &k,
                a.fence,
                true,
                Outcome {
                    status: 1,
                    body: vec![0; 17],
                    error: None
                }
            )
            .await,
        Err(StoreError::OutcomeTooLarge { .. })
    ));
    assert_eq!(view(store, &k).await.record.state, RecordState::InProgress);
    store
        .complete(&k, a.fence, Outcome::new(200, vec![7; 16]))
        .await
        .expect("16 bytes fit");
    assert_eq!(
        view(store, &k).await.record.outcome.map(|o| o.body.len()),
        Some(16)
    );

    let k2 = key(2);
    let b = claimed(store, request(&k2, 1, 60_000, 60_000, 1)).await;
    store
        .fail(&k2, b.fence, true, Outcome::error(1, "x".repeat(100_000)))
        .await
        .expect("fail");
    let error = view(store, &k2)
        .await
        .record
        .outcome
        .and_then(|o| o.error)
        .expect("error text");
    assert!(
        error.len() <= crate::MAX_ERROR_BYTES && error.ends_with(TRUNCATION_MARK),
        "{} bytes",
        error.len()
    );
}

/// `list` filters by namespace, partition and state, newest first, with a
/// limit.
pub async fn list_filters<F, Fut>(factory: &F)
where
    F: Fn(StoreOptions) -> Fut,
    Fut: Future<Output = Fixture>,
{
    let (fx, clock) = fixture(factory, crate::DEFAULT_MAX_OUTCOME_BYTES).await;
    let store = fx.store.as_ref();
    let mut fences = Vec::new();
    for n in 0..4 {
        let mut req = request(&key(n), 1, 60_000, 60_000, 1);
        if n == 3 {
            req.key.namespace = "elsewhere".into();
            req.partition = "customer-2".into();
        }
        let key = req.key.clone();
        fences.push((key, claimed(store, req).await.fence));
        clock.advance(ms(10));
    }
    store
        .complete(&fences[0].0, fences[0].1, Outcome::new(0, Vec::new()))
        .await
        .expect("complete");
    let keys = |views: Vec<RecordView>| views.into_iter().map(|v| v.record.key).collect::<Vec<_>>();
    let all = keys(store.list(ListFilter::default()).await.expect("list"));
    let expected: Vec<RecordKey> = [0usize, 3, 2, 1]
        .iter()
        .map(|&i| fences[i].0.clone())
        .collect();
    assert_eq!(all, expected, "most recently updated first");
    let ns = ListFilter {
        namespace: Some("conformance".into()),
        ..ListFilter::default()
    };
    assert_eq!(store.list(ns.clone()).await.expect("list").len(), 3);
    let limited = ListFilter {
        limit: Some(2),
        ..ns
    };
    assert_eq!(
        keys(store.list(limited).await.expect("list")),
        vec![fences[0].0.clone(), fences[2].0.clone()]
    );
    let done = ListFilter {
        state: Some(RecordState::Completed),
        ..ListFilter::default()
    };
    assert_eq!(
        keys(store.list(done).await.expect("list")),
        vec![fences[0].0.clone()]
    );
    let part = ListFilter {
        partition: Some("customer-2".into()),
        ..ListFilter::default()
    };
    assert_eq!(
        keys(store.list(part).await.expect("list")),
        vec![fences[3].0.clone()]
    );
}

fn names(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

async fn join(store: &dyn Store, group: &str, members: &[&str]) -> Membership {
    store
        .join_membership(group, &names(members))
        .await
        .unwrap_or_else(|e| panic!("{}: join {group}: {e}", store.describe()))
}

fn token(group: &str, epoch: u64) -> OwnershipToken {
    OwnershipToken {
        group: group.to_string(),
        epoch,
    }
}

fn owned(key: &RecordKey, lease_ms: u64, token: OwnershipToken) -> ClaimRequest {
    ClaimRequest {
        ownership: Some(token),
        ..request(key, 1, lease_ms, 60_000, 1)
    }
}

fn assert_stale<T: std::fmt::Debug>(result: Result<T, StoreError>, epoch: u64, current: u64) {
    match result {
        Err(StoreError::StaleEpoch {
            epoch: e,
            current: c,
            ..
        }) if e == epoch && c == current => {}
        other => {
            panic!("expected StaleEpoch {{ epoch: {epoch}, current: {current} }}, got {other:?}")
        }
    }
}

/// Memberships and their epochs: registering the same members (in any
/// order, with repeats) keeps the epoch; different members move it, from a
/// store-wide monotonic sequence that survives reopening; bad memberships
/// are refused.
pub async fn membership_epochs<F, Fut>(factory: &F)
where
    F: Fn(StoreOptions) -> Fut,
    Fut: Future<Output = Fixture>,
{
    let (fx, _clock) = fixture(factory, crate::DEFAULT_MAX_OUTCOME_BYTES).await;
    let store = fx.store.clone();
    assert_eq!(store.membership("nightly").await.expect("read"), None);
    let first = join(store.as_ref(), "nightly", &["w-b", "w-a", "w-b"]).await;
    assert!(first.epoch > 0);
    assert_eq!(first.members, names(&["w-a", "w-b"]), "sorted, no repeats");
    let same = join(store.as_ref(), "nightly", &["w-a", "w-b"]).await;
    assert_eq!(same, first, "the same members keep the epoch");
    let other = join(store.as_ref(), "hourly", &["x"]).await;
    assert!(other.epoch > first.epoch, "epochs are store-wide");
    let grown = join(store.as_ref(), "nightly", &["w-a", "w-b", "w-c"]).await;
    assert!(grown.epoch > other.epoch, "{grown:?} after {other:?}");
    let shrunk = join(store.as_ref(), "nightly", &["w-a", "w-b"]).await;
    assert!(
        shrunk.epoch > grown.epoch,
        "going back to an old membership is a new epoch"
    );
    assert_eq!(
        store.membership("nightly").await.expect("read"),
        Some(shrunk.clone())
    );
    assert_eq!(
        store.membership("hourly").await.expect("read"),
        Some(other.clone()),
        "groups are independent"
    );
    for bad in [
        vec![],
        names(&[""]),
        names(&["a\nb"]),
        names(&["ok", "tab\t"]),
    ] {
        match store.join_membership("nightly", &bad).await {
            Err(StoreError::InvalidRequest(_)) => {}
            other => panic!("members {bad:?}: expected InvalidRequest, got {other:?}"),
        }
    }
    assert!(matches!(
        store.join_membership("", &names(&["a"])).await,
        Err(StoreError::InvalidRequest(_))
    ));
    assert_eq!(
        store.membership("nightly").await.expect("read"),
        Some(shrunk.clone()),
        "a refused membership changes nothing"
    );
    if let Some(reopen) = &fx.reopen {
        drop(store);
        let again = reopen().await;
        assert_eq!(
            again.membership("nightly").await.expect("read"),
            Some(shrunk.clone()),
            "memberships survive reopening"
        );
        let next = join(again.as_ref(), "nightly", &["w-z"]).await;
        assert!(next.epoch > shrunk.epoch, "epochs survive reopening");
    }
}

/// A claim or take-over under a stale ownership epoch is refused and
/// changes nothing: the owner deposed while paused cannot start an effect
/// when it wakes. The current epoch is accepted; a claim without a token is
/// not checked.
pub async fn stale_epoch_is_refused<F, Fut>(factory: &F)
where
    F: Fn(StoreOptions) -> Fut,
    Fut: Future<Output = Fixture>,
{
    let (fx, clock) = fixture(factory, crate::DEFAULT_MAX_OUTCOME_BYTES).await;
    let store = fx.store.as_ref();
    // No membership yet: no epoch is current.
    assert_stale(
        store
            .claim(owned(&key(9), 1_000, token("nightly", 1)))
            .await,
        1,
        0,
    );
    assert_eq!(store.get(&key(9)).await.expect("get"), None);

    let old = join(store, "nightly", &["w-a", "w-b"]).await;
    let hourly = join(store, "hourly", &["w-a"]).await;
    // The old owner claims key 1 under its epoch, then pauses.
    let a = claimed(store, owned(&key(1), 1_000, old.token())).await;
    // Meanwhile the membership changes: the old owner is deposed.
    let new = join(store, "nightly", &["w-b", "w-c"]).await;
    assert!(new.epoch > old.epoch);
    // It wakes: a fresh claim under its stale epoch is refused...
    assert_stale(
        store.claim(owned(&key(2), 1_000, old.token())).await,
        old.epoch,
        new.epoch,
    );
    assert_eq!(
        store.get(&key(2)).await.expect("get"),
        None,
        "nothing written"
    );
    // ...and so is a take-over of its own expired claim.
    clock.advance(ms(1_000));
    assert_stale(
        store
            .take_over_with(&key(1), a.fence, ms(1_000), holder(1), Some(&old.token()))
            .await,
        old.epoch,
        new.epoch,
    );
    let record = view(store, &key(1)).await.record;
    assert_eq!(
        (record.fence, record.attempts, record.state),
        (a.fence, 1, RecordState::InProgress),
        "a refused take-over changes nothing"
    );
    // An epoch this store never issued to the group is refused too.
    assert_stale(
        store
            .claim(owned(&key(3), 1_000, token("nightly", new.epoch + 1)))
            .await,
        new.epoch + 1,
        new.epoch,
    );
    // The current owner claims and takes over under the current epoch.
    let b = claimed(store, owned(&key(2), 1_000, new.token())).await;
    assert!(b.fence > a.fence);
    let c = store
        .take_over_with(&key(1), a.fence, ms(1_000), holder(2), Some(&new.token()))
        .await
        .expect("take-over under the current epoch");
    assert!(c.fence > b.fence);
    // The deposed holder's fence no longer writes either.
    assert_fenced(
        store
            .complete(&key(1), a.fence, Outcome::new(0, Vec::new()))
            .await,
        a.fence,
        c.fence,
    );
    // A duplicate under the current epoch sees the record (not refused).
    existing(store, owned(&key(2), 1_000, new.token())).await;
    // Another group's epoch is unaffected; no token, no check.
    claimed(store, owned(&key(4), 1_000, hourly.token())).await;
    claimed(store, request(&key(5), 1, 1_000, 60_000, 1)).await;
}

fn acquired(result: Result<JobLeaseAcquire, StoreError>) -> JobLease {
    match result {
        Ok(JobLeaseAcquire::Acquired(lease)) => lease,
        other => panic!("expected Acquired, got {other:?}"),
    }
}

fn held(result: Result<JobLeaseAcquire, StoreError>) -> (JobLease, u64) {
    match result {
        Ok(JobLeaseAcquire::Held {
            current,
            remaining_ms,
        }) => (current, remaining_ms),
        other => panic!("expected Held, got {other:?}"),
    }
}

fn assert_lost<T: std::fmt::Debug>(result: Result<T, StoreError>, fence: u64) {
    match result {
        Err(StoreError::JobLeaseLost { fence: f, .. }) if f == fence => {}
        other => panic!("expected JobLeaseLost (fence {fence}), got {other:?}"),
    }
}

/// Job leases: one live holder per job, by the store clock; heartbeat and
/// release are fenced; a lease that ended or was released is taken under a
/// higher fence (from the store-wide fence sequence).
pub async fn job_lease<F, Fut>(factory: &F)
where
    F: Fn(StoreOptions) -> Fut,
    Fut: Future<Output = Fixture>,
{
    let (fx, clock) = fixture(factory, crate::DEFAULT_MAX_OUTCOME_BYTES).await;
    let store = fx.store.as_ref();
    let a = acquired(store.acquire_job_lease("nightly", "run-a", ms(1_000)).await);
    assert_eq!((a.job.as_str(), a.holder.as_str()), ("nightly", "run-a"));
    assert_eq!(a.lease_until_ms, START_MS + 1_000);
    let (current, left) = held(store.acquire_job_lease("nightly", "run-b", ms(1_000)).await);
    assert_eq!((current.clone(), left), (a.clone(), 1_000));
    // Another job is independent.
    let other = acquired(store.acquire_job_lease("hourly", "run-b", ms(1_000)).await);
    assert!(other.fence > a.fence);

    clock.advance(ms(400));
    let until = store
        .heartbeat_job_lease("nightly", a.fence, ms(1_000))
        .await
        .expect("heartbeat");
    assert_eq!(until, START_MS + 1_400);
    clock.advance(ms(999));
    let (_, left) = held(store.acquire_job_lease("nightly", "run-b", ms(1_000)).await);
    assert_eq!(left, 1, "live until its last millisecond");
    clock.advance(ms(1));
    // Ended by the store clock: taken under a higher fence.
    let b = acquired(store.acquire_job_lease("nightly", "run-b", ms(1_000)).await);
    assert!(b.fence > other.fence);
    // The deposed holder can neither extend nor release it.
    assert_lost(
        store
            .heartbeat_job_lease("nightly", a.fence, ms(1_000))
            .await,
        a.fence,
    );
    assert_lost(store.release_job_lease("nightly", a.fence).await, a.fence);
    let (current, _) = held(store.acquire_job_lease("nightly", "run-c", ms(1_000)).await);
    assert_eq!(current, b, "a refused release changes nothing");
    // Released: the next run takes it at once.
    store
        .release_job_lease("nightly", b.fence)
        .await
        .expect("release");
    assert_lost(store.release_job_lease("nightly", b.fence).await, b.fence);
    assert_lost(
        store.heartbeat_job_lease("nightly", b.fence, ms(1)).await,
        b.fence,
    );
    let c = acquired(store.acquire_job_lease("nightly", "run-c", ms(1_000)).await);
    assert!(c.fence > b.fence);
    // Job-lease fences and record fences share one sequence.
    let claim = claimed(store, request(&key(1), 1, 1_000, 60_000, 1)).await;
    assert!(claim.fence > c.fence);
    for (job, who) in [("", "run"), ("job", ""), ("job\n", "run")] {
        assert!(
            matches!(
                store.acquire_job_lease(job, who, ms(1)).await,
                Err(StoreError::InvalidRequest(_))
            ),
            "job {job:?} holder {who:?}"
        );
    }
}

/// Runs every check above against stores from `factory`.
pub async fn run_all<F, Fut>(factory: &F)
where
    F: Fn(StoreOptions) -> Fut,
    Fut: Future<Output = Fixture>,
{
    claim_and_duplicate(factory).await;
    complete_then_replay(factory).await;
    fenced_stale_writes(factory).await;
    lease_expiry_and_take_over(factory).await;
    expired_holder_may_still_write(factory).await;
    take_over_refused_for_final(factory).await;
    heartbeat_extends_and_is_fenced(factory).await;
    fail_retryable_then_take_over(factory).await;
    mark_unknown(factory).await;
    retention_and_gc(factory).await;
    claim_many_is_claims_in_order(factory).await;
    finish_many_is_finishes_in_order(factory).await;
    fence_monotonic_across_gc_and_reopen(factory).await;
    outcome_size_cap(factory).await;
    list_filters(factory).await;
    membership_epochs(factory).await;
    stale_epoch_is_refused(factory).await;
    job_lease(factory).await;
}
