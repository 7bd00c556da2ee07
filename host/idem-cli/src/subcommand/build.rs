//! `idem build`: a policy crate to a component, from any directory, with
//! nothing but this binary and rustup (the wasm target is added when
//! missing). The same code builds the example policies
//! (`idem_guest_build`).

use std::path::PathBuf;

use clap::Args;

use crate::exit::{Failure, SUCCESS};

/// `idem build`'s flags.
#[derive(Args, Debug)]
pub struct BuildArgs {
    /// The policy crate: its directory or its Cargo.toml.
    #[arg(value_name = "PATH", default_value = ".")]
    pub path: PathBuf,
    /// Where the component goes [default: `policies/` in the crate's
    /// target directory].
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

/// Runs `idem build`: prints the component's path on stdout.
pub fn run(args: BuildArgs) -> Result<u8, Failure> {
    // The first build of a crate compiles its dependencies for wasm, a
    // minute or two: say so, and let cargo's progress show beneath.
    eprintln!(
        "idem: building {} for {} (release, size-optimised; a first build compiles the SDK's dependencies, cargo's progress follows)",
        args.path.display(),
        idem_guest_build::GUEST_TARGET
    );
    let built = idem_guest_build::build_crate(&args.path, args.out.as_deref())
        .map_err(|e| Failure::input(format!("cannot build {}: {e:#}", args.path.display())))?;
    println!("{}", built.component.display());
    Ok(SUCCESS)
}
