//! `idem describe`: what a policy says it is, and its digest.

use clap::Args;

use crate::exit::{Failure, SUCCESS};
use crate::policy_args::PolicyArgs;

/// `idem describe`'s flags.
#[derive(Args, Debug)]
pub struct DescribeArgs {
    #[command(flatten)]
    pub policy: PolicyArgs,
}

/// Runs `idem describe`.
pub fn run(args: DescribeArgs) -> Result<u8, Failure> {
    let policy = args.policy.load()?;
    let info = policy.info();
    let out = serde_json::json!({
        "name": info.name,
        "version": info.version,
        "namespace": info.namespace,
        "description": info.description,
        "policy": policy.digest(),
        "size": policy.size(),
        "interface": idem::policy::POLICY_INTERFACE,
    });
    println!("{out}");
    Ok(SUCCESS)
}
