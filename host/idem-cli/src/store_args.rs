//! Flags shared by every command that opens a store, and the async runtime.

use std::sync::Arc;

use clap::Args;
use idem_store::{Store, StoreOptions};

use crate::exit::Failure;

/// Which store.
#[derive(Args, Debug, Clone)]
pub struct StoreArgs {
    /// The store: `sqlite:PATH` (the embedded default), `postgres://…`
    /// (shared by many machines) or `memory:`.
    // `--help` would show the variable's value, password and all.
    #[arg(long, value_name = "URL", env = "IDEM_STORE", hide_env_values = true)]
    pub store: String,
}

impl StoreArgs {
    /// Opens the store (creating and migrating a SQLite file when needed).
    pub async fn open(&self) -> Result<Arc<dyn Store>, Failure> {
        idem_store::open(&self.store, StoreOptions::default())
            .await
            .map_err(|e| Failure::input(format!("cannot open store {}: {e}", self.shown())))
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
