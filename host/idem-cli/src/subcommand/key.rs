//! `idem key`: one operation in, its key out.

use std::path::PathBuf;

use clap::Args;
use idem_core::{KEY_ENCODING_VERSION, Operation};
use serde_json::json;

use crate::exit::{Failure, POLICY_FAILED, POLICY_REFUSED, SUCCESS};
use crate::input::read_op_bytes;
use crate::policy_args::PolicyArgs;

/// `idem key`'s flags.
#[derive(Args, Debug)]
pub struct KeyArgs {
    #[command(flatten)]
    pub policy: PolicyArgs,
    /// The operation as JSON: a file, or `-` (the default) for standard input.
    #[arg(value_name = "OP.json", default_value = "-")]
    pub op: PathBuf,
    /// Also show the canonical operation and the material behind the key and
    /// the fingerprint.
    #[arg(long)]
    pub explain: bool,
}

/// Runs `idem key`.
pub fn run(args: KeyArgs) -> Result<u8, Failure> {
    let policy = args.policy.load()?;
    let bytes = read_op_bytes(&args.op)?;
    let op = Operation::from_slice(&bytes, &policy.limits().operation)
        .map_err(|e| Failure::input(format!("{}: {e}", args.op.display())))?;
    // The time `idem exec` would hand the policy with the default store.
    let now_ms = idem_store::StoreClock::system().now_ms();
    let evaluated = policy.derive(&op, now_ms).map_err(|e| Failure {
        code: POLICY_FAILED,
        message: format!("policy {} failed: {e}", policy.digest()),
    })?;
    let keyed = match evaluated.value {
        Ok(k) => k,
        Err(refusal) => {
            let out = json!({
                "error": {
                    "code": refusal.code.as_str(),
                    "status": refusal.code.status(),
                    "field": refusal.field,
                    "message": refusal.message,
                },
                "policy": policy.digest(),
            });
            println!("{out}");
            return Err(Failure {
                code: POLICY_REFUSED,
                message: format!("the policy refused the operation: {refusal}"),
            });
        }
    };
    let mut out = json!({
        "key": keyed.key.to_hex(),
        "fingerprint": keyed.fingerprint.to_hex(),
        "partition": keyed.partition,
        "policy": policy.digest(),
        "retention_s": keyed.retention_s,
        "lease_s": keyed.lease_s,
        "fuel": evaluated.fuel_used,
    });
    if args.explain {
        out["explain"] = json!({
            "operation": serde_json::from_str::<serde_json::Value>(&op.canonical_json()).unwrap_or_default(),
            "namespace": keyed.namespace,
            "key_material": keyed.key_material,
            "fingerprint_material": keyed.fingerprint_material,
            "encoding": format!(
                "sha256(u32be({KEY_ENCODING_VERSION}) lp(domain) lp(namespace) u32be(count) [lp(name) lp(value)]...), lp(x) = u32be(len) x; domain is \"key\" or \"fingerprint\""
            ),
            "policy": policy.info(),
        });
        println!("{}", serde_json::to_string_pretty(&out).unwrap_or_default());
    } else {
        println!("{out}");
    }
    Ok(SUCCESS)
}
