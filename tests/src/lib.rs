//! Shared helpers for idem's integration, conformance and chaos suites.

// The book's snippets as doctests; nothing else sees it.
#[cfg(doctest)]
mod book;
pub mod cut_proxy;
pub mod pg_cluster;
pub mod ports;
pub mod tmpfs;

use std::path::PathBuf;
use std::sync::OnceLock;

use idem::policy::{LoadedPolicy, PolicyRuntime, RuntimeConfig};

/// The directory holding the components the build made for the tests.
pub fn policies_dir() -> PathBuf {
    PathBuf::from(env!("IDEM_TEST_POLICIES"))
}

/// The path of a built test policy, e.g. `policy_path("billing-charge")`.
pub fn policy_path(name: &str) -> PathBuf {
    policies_dir().join(format!("{name}.wasm"))
}

/// The bytes of a built test policy.
pub fn policy_bytes(name: &str) -> Vec<u8> {
    let path = policy_path(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// The workspace root.
pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ is in the workspace")
        .to_path_buf()
}

/// A runtime with default limits and no artifact cache, shared by tests.
pub fn runtime() -> &'static PolicyRuntime {
    static RUNTIME: OnceLock<PolicyRuntime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        PolicyRuntime::new(RuntimeConfig {
            cache_dir: None,
            ..RuntimeConfig::default()
        })
        .expect("runtime starts")
    })
}

/// Loads a built test policy into the shared runtime.
pub fn load(name: &str) -> LoadedPolicy {
    runtime()
        .load_bytes(&policy_bytes(name))
        .unwrap_or_else(|e| panic!("cannot load {name}: {e}"))
}

/// An engine of the built test policy `policy` over the store at `url`
/// (opened, migrated), with the default options.
pub async fn engine_on(policy: &str, url: &str) -> idem::engine::Engine {
    let store = idem::store::open(url, idem::store::StoreOptions::default())
        .await
        .unwrap_or_else(|e| panic!("cannot open {url}: {e}"));
    idem::engine::Engine::new(load(policy), store, idem::engine::EngineOptions::default())
}

/// The `idem` binary built beside this test binary. `cargo test --workspace`
/// builds it, because its package, `idem-cli`, has an integration test of
/// its own (cargo builds a package's binaries for its integration tests).
pub fn idem_bin() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    // target/<profile>/deps/suite-<hash> → target/<profile>/idem
    let bin = exe
        .parent()
        .and_then(|deps| deps.parent())
        .map(|p| p.join("idem"))
        .expect("target layout");
    assert!(
        bin.is_file(),
        "{} is missing: run the suites with `cargo test --workspace`, which builds the CLI (or `cargo build -p idem-cli` first)",
        bin.display()
    );
    bin
}

/// Whether `program` runs (`program --version` succeeds). A test that needs
/// one that is missing says so on stderr and is skipped, except under CI
/// (`CI=true`), where its absence fails the test.
pub fn tool_available(test: &str, program: &str) -> bool {
    let found = std::process::Command::new(program)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
        assert!(!ci, "{test}: `{program}` is not installed, and CI=true");
        eprintln!("SKIPPED {test}: `{program}` is not installed");
    }
    found
}

/// The PostgreSQL URL for tests that need one (`IDEM_TEST_POSTGRES_URL`).
/// Without it the test says clearly that it was skipped — unless `CI=true`,
/// where a missing database is a failure, never a silent skip.
pub fn postgres_url(test: &str) -> Option<String> {
    idem_store_conformance::postgres_test_url(test)
}

/// The NATS (JetStream) URL for tests that need a broker
/// (`IDEM_TEST_NATS_URL`), with the rule of [`postgres_url`]: without it the
/// test says it was skipped, unless `CI=true`, where it fails.
pub fn nats_url(test: &str) -> Option<String> {
    service_url(test, "IDEM_TEST_NATS_URL", "nats://127.0.0.1:4222")
}

/// The RabbitMQ URL for tests that need one (`IDEM_TEST_AMQP_URL`), with
/// the rule of [`postgres_url`].
pub fn amqp_url(test: &str) -> Option<String> {
    service_url(
        test,
        "IDEM_TEST_AMQP_URL",
        "amqp://guest:guest@127.0.0.1:5672/%2f",
    )
}

/// The Redis URL for tests that need one (`IDEM_TEST_REDIS_URL`), with
/// the rule of [`postgres_url`].
pub fn redis_url(test: &str) -> Option<String> {
    service_url(test, "IDEM_TEST_REDIS_URL", "redis://127.0.0.1:6379")
}

fn service_url(test: &str, variable: &str, example: &str) -> Option<String> {
    match std::env::var(variable) {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
            assert!(!ci, "{test}: {variable} is not set, and CI=true");
            eprintln!("SKIPPED {test}: set {variable} (e.g. {example})");
            None
        }
    }
}

/// Runs `command` and returns its output, failing the test with its stderr
/// unless it exited successfully.
pub fn succeed(command: &mut std::process::Command) -> std::process::Output {
    let out = command.output().expect("the command runs");
    assert!(
        out.status.success(),
        "{command:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Runs `command` (`what` names it), failing the test with everything it
/// printed unless it succeeded; its stdout.
pub fn passes(what: &str, command: &mut std::process::Command) -> String {
    let out = command.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// A temporary directory and a store for one test: a SQLite file in the
/// directory, or a fresh PostgreSQL schema dropped when the test ends.
pub struct TestStore {
    /// The directory (a SQLite store's file lives in it).
    pub dir: tempfile::TempDir,
    /// The store URL.
    pub store: String,
    postgres: bool,
}

impl TestStore {
    /// A SQLite store (`idem.db` in a fresh directory).
    pub fn sqlite() -> TestStore {
        let dir = tempfile::tempdir().unwrap();
        let store = format!("sqlite:{}", dir.path().join("idem.db").display());
        TestStore {
            dir,
            store,
            postgres: false,
        }
    }

    /// A fresh schema in the PostgreSQL database `url` names.
    pub fn postgres(url: &str) -> TestStore {
        let sep = if url.contains('?') { '&' } else { '?' };
        let schema = idem_store_conformance::fresh_schema();
        TestStore {
            dir: tempfile::tempdir().unwrap(),
            store: format!("{url}{sep}idem_schema={schema}&idem_pool_size=2"),
            postgres: true,
        }
    }
}

impl Drop for TestStore {
    fn drop(&mut self) {
        if self.postgres {
            idem_store_conformance::drop_postgres_schema(&self.store);
        }
    }
}
