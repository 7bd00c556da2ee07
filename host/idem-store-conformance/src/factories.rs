//! Fixtures and the factories that make them: in-memory, SQLite and
//! PostgreSQL stores, the rule for finding the PostgreSQL test database, and
//! the schema helpers that clean up after PostgreSQL tests.

use std::any::Any;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use idem_store::{MemoryStore, Store, StoreOptions};
#[cfg(feature = "postgres")]
use idem_store::{PostgresStore, PostgresUrl};
#[cfg(feature = "sqlite")]
use idem_store::{SqliteOptions, SqliteStore, Synchronous};

/// A boxed, sendable future.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// Opens the same data again through a new store (a new connection).
pub type Reopen = Box<dyn Fn() -> BoxFuture<Store> + Send + Sync>;

/// A fresh store made by a factory.
pub struct Fixture {
    /// The store, empty.
    pub store: Store,
    /// For persistent stores: opens the same data again, with the same
    /// options. `None` for stores whose data dies with them.
    pub reopen: Option<Reopen>,
    /// Whatever must outlive the store (e.g. its temporary directory).
    pub guard: Option<Box<dyn Any + Send + Sync>>,
}

/// A factory of in-memory stores.
pub fn memory_factory() -> impl Fn(StoreOptions) -> BoxFuture<Fixture> + Send + Sync + 'static {
    |options| {
        Box::pin(async move {
            let store: Store = MemoryStore::new(options).into();
            Fixture {
                store,
                reopen: None,
                guard: None,
            }
        })
    }
}

#[cfg(feature = "sqlite")]
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
                move |options: StoreOptions| -> BoxFuture<Store> {
                    let path = path.clone();
                    Box::pin(async move {
                        let store = tokio::task::spawn_blocking(move || {
                            SqliteStore::open(&path, sqlite, options)
                        })
                        .await
                        .expect("the open task")
                        .expect("opening the SQLite store");
                        Store::from(store)
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

#[cfg(feature = "sqlite")]
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

#[cfg(feature = "postgres")]
/// Drops a test's schema when the fixture goes: from a thread and runtime
/// of its own, through a connection of its own, since the test's runtime
/// may be the one dropping the fixture. A failure only warns: the schema is
/// then left behind (named `idem_test_*`).
struct DropSchema(PostgresUrl);

#[cfg(feature = "postgres")]
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

#[cfg(feature = "postgres")]
/// Drops the schema a PostgreSQL store URL names (its `idem_schema`), as a
/// fixture does when it goes: for tests whose stores another process (the
/// CLI) created. A URL that does not parse drops nothing.
pub fn drop_postgres_schema(store_url: &str) {
    if let Ok(url) = store_url.parse::<PostgresUrl>() {
        drop(DropSchema(url));
    }
}

#[cfg(feature = "postgres")]
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
                move |options: StoreOptions| -> BoxFuture<Store> {
                    let url = url.clone();
                    Box::pin(async move {
                        let store = PostgresStore::open(url, options)
                            .await
                            .unwrap_or_else(|e| panic!("opening the PostgreSQL store: {e}"));
                        Store::from(store)
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

/// `factory`'s stores behind a [`idem_store::GroupCommit`] (grouping always, on
/// any store, two calls of a kind in flight at most): the same checks must
/// hold when concurrent claims and finishes share store calls. `reopen`
/// wraps the reopened store too.
pub fn grouped<F, Fut>(factory: F) -> impl Fn(StoreOptions) -> BoxFuture<Fixture> + Send + Sync
where
    F: Fn(StoreOptions) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Fixture> + Send + 'static,
{
    let factory = Arc::new(factory);
    move |options| {
        let factory = factory.clone();
        Box::pin(async move {
            let fixture = factory(options).await;
            let wrap = |store: Store| -> Store {
                // Two calls of a kind in flight: both the waiting line and
                // batches racing each other are exercised.
                let options = idem_store::GroupCommitOptions {
                    max_in_flight: Some(2),
                    ..idem_store::GroupCommitOptions::default()
                };
                store.with_writes(Arc::new(idem_store::GroupCommit::new(
                    store.writes_handle(),
                    options,
                )))
            };
            let reopen = fixture.reopen.map(|reopen| -> Reopen {
                let reopen = Arc::new(reopen);
                Box::new(move || {
                    let reopen = reopen.clone();
                    Box::pin(async move { wrap(reopen().await) })
                })
            });
            Fixture {
                store: wrap(fixture.store),
                reopen,
                guard: fixture.guard,
            }
        })
    }
}
