//! `idem gc`: removes the records past their retention.

use clap::Args;

use crate::exit::{Failure, SUCCESS};
use crate::store_args::{StoreArgs, runtime};

/// `idem gc`'s flags.
#[derive(Args, Debug)]
pub struct GcArgs {
    #[command(flatten)]
    pub store: StoreArgs,
}

/// Runs `idem gc`.
pub fn run(args: GcArgs) -> Result<u8, Failure> {
    runtime()?.block_on(async {
        let store = args.store.open().await?;
        let removed = store
            .records()
            .gc()
            .await
            .map_err(|e| Failure::input(format!("gc failed on {}: {e}", args.store.shown())))?;
        println!("removed {removed} records past their retention");
        Ok(SUCCESS)
    })
}
