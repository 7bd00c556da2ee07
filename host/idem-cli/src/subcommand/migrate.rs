//! `idem migrate`: creates the store or brings its schema up to date.

use clap::Args;

use crate::exit::{Failure, SUCCESS};
use crate::store_args::{StoreArgs, runtime};

/// `idem migrate`'s flags.
#[derive(Args, Debug)]
pub struct MigrateArgs {
    #[command(flatten)]
    pub store: StoreArgs,
}

/// Runs `idem migrate`. Every command also migrates on first use; this is
/// for deploy scripts.
pub fn run(args: MigrateArgs) -> Result<u8, Failure> {
    runtime()?.block_on(async {
        let version = idem_store::migrate(&args.store.store)
            .await
            .map_err(|e| Failure::input(format!("cannot migrate {}: {e}", args.store.shown())))?;
        println!("{} is at schema version {version}", args.store.shown());
        Ok(SUCCESS)
    })
}
