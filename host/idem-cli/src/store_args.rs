//! Flags shared by every command that opens a store, and the async runtime.

use std::time::Duration;

use clap::Args;
use idem_store::{Store, StoreOptions, StoreUrl};

use crate::exit::Failure;
use crate::shown::tell;

/// Which store.
#[derive(Args, Debug, Clone)]
pub struct StoreArgs {
    /// The store: `sqlite:PATH` (the embedded default), `postgres://…`
    /// (shared by many machines) or `memory:`.
    // `--help` would show the variable's value, password and all.
    #[arg(long, value_name = "URL", env = "IDEM_STORE", hide_env_values = true)]
    pub store: String,
    /// Records keep no canonical operation (for operations with fields
    /// that must not sit in the store); such records cannot be diffed by
    /// `idem diff --store` or checked by `idem policy activate`.
    #[arg(long)]
    pub no_keep_operations: bool,
}

impl StoreArgs {
    /// Opens the store (creating and migrating a SQLite file when needed).
    pub async fn open(&self) -> Result<Store, Failure> {
        self.open_with(self.options()).await
    }

    /// The options every open uses: `--no-keep-operations` applied.
    pub fn options(&self) -> StoreOptions {
        StoreOptions {
            keep_operations: !self.no_keep_operations,
            ..StoreOptions::default()
        }
    }

    async fn open_with(&self, options: StoreOptions) -> Result<Store, Failure> {
        idem_store::open(&self.store, options)
            .await
            .map_err(|e| self.open_failure(e))
    }

    /// The failure of an open of this store, naming it (its password
    /// hidden).
    pub fn open_failure(&self, e: idem_store::StoreError) -> Failure {
        Failure::input(format!("cannot open store {}: {e}", self.shown()))
    }

    /// Opens the store, trying again while it is unavailable (a server
    /// still starting, a fail-over) for up to `budget` (`--store-outage`).
    /// Past it, says so and gives the exit code (`Ok(Err(code))`): nothing
    /// ran.
    pub async fn open_riding_out(&self, budget: Duration) -> Result<Result<Store, u8>, Failure> {
        let waiting = |e: &idem_store::StoreError| told_waiting(e, budget);
        match idem::job::open_riding_out(&self.store, self.options(), budget, waiting).await {
            Ok(store) => Ok(Ok(store)),
            Err(e) if e.is_unavailable() => Ok(Err(told_gave_up(&e, budget))),
            Err(e) => Err(self.open_failure(e)),
        }
    }

    /// Opens a store that must already exist, for commands that only read
    /// (`inspect`, `report`, `review`): a mistyped SQLite path or
    /// PostgreSQL schema is an error naming it, never a new empty store
    /// that then reports "0 records"; nothing is created or migrated.
    pub async fn open_existing(&self) -> Result<Store, Failure> {
        let url = self
            .store
            .parse::<StoreUrl>()
            .map_err(|e| Failure::input(format!("cannot open store {}: {e}", self.shown())))?;
        if let StoreUrl::Sqlite { path, .. } = &url
            && !path.is_file()
        {
            return Err(Failure::input(format!(
                "no store at {}: {} (this command only reads; `idem migrate --store {}` creates a store)",
                path.display(),
                if path.exists() {
                    "it is not a file"
                } else {
                    "no such file"
                },
                self.shown()
            )));
        }
        self.open_with(StoreOptions {
            migrate: false,
            ..StoreOptions::default()
        })
        .await
    }

    /// The store URL fit to print: never its password.
    pub fn shown(&self) -> String {
        idem_store::redacted_url(&self.store)
    }
}

/// The async runtime commands run on.
pub fn runtime() -> Result<tokio::runtime::Runtime, Failure> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::input(format!("cannot start the async runtime: {e}")))
}

/// Says, at an outage's first failure, that the store is waited for.
pub fn told_waiting(e: &dyn std::fmt::Display, budget: Duration) {
    tell!(
        "idem: the store is unavailable ({e}); trying again for up to {}",
        humantime::format_duration(budget)
    )
}

/// Says that the store stayed away past the budget and nothing ran; the
/// exit status for it.
pub fn told_gave_up(e: &dyn std::fmt::Display, budget: Duration) -> u8 {
    tell!(
        "idem: stopped: the store stayed unavailable past --store-outage {}; the command did not run: {e}",
        humantime::format_duration(budget)
    );
    crate::exit::STORE_UNAVAILABLE
}
