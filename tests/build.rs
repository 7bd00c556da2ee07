//! Builds the example policies and the misbehaving fixtures as components,
//! so the suites test real `.wasm` files made by the build, never committed
//! binaries. Their directory reaches the tests as `IDEM_TEST_POLICIES`.

use std::path::{Path, PathBuf};

use idem_guest_build::GuestBuild;

const GUESTS: &[&str] = &[
    "billing-charge",
    "http-idempotency-key",
    "provider-charge",
    "refunds",
    "fixture-misbehaving",
    "fixture-wasi-import",
    "fixture-wrong-world",
    "fixture-billing-v2-renamed",
    "fixture-billing-v1-1",
];

fn main() {
    let manifest_dir = PathBuf::from(
        std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"),
    );
    let root = manifest_dir
        .parent()
        .expect("tests/ sits in the workspace")
        .to_path_buf();
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    for watched in ["wit", "guest/sdk", "guest/policies", "tests/fixtures"] {
        println!("cargo:rerun-if-changed={}", root.join(watched).display());
    }
    let build = GuestBuild {
        manifest: root.join("Cargo.toml"),
        target_dir: guest_target_dir(&out_dir),
        out_dir: out_dir.join("policies"),
        cargo: std::env::var_os("CARGO")
            .map(PathBuf::from)
            .unwrap_or_else(|| "cargo".into()),
        // policy_runtime.rs loads billing-charge.core.wasm to check that a
        // core module is refused with a clear error.
        keep_core_module: true,
    };
    if let Err(e) = build.build(GUESTS) {
        panic!("building the test policies failed: {e:#}");
    }
    println!(
        "cargo:rustc-env=IDEM_TEST_POLICIES={}",
        build.out_dir.display()
    );
}

/// `<target>/idem-guests`: beside the native profiles, shared by debug and
/// release builds, apart from the outer build's own lock.
fn guest_target_dir(out_dir: &Path) -> PathBuf {
    // OUT_DIR is <target>[/<triple>]/<profile>/build/<crate>-<hash>/out.
    out_dir
        .ancestors()
        .nth(4)
        .map(|target| target.join("idem-guests"))
        .unwrap_or_else(|| out_dir.join("idem-guests"))
}
