//! Shared helpers for idem's integration, conformance and chaos suites.

use std::path::PathBuf;

/// The directory holding the components the build made for the tests.
pub fn policies_dir() -> PathBuf {
    PathBuf::from(env!("IDEM_TEST_POLICIES"))
}

/// The path of a built test policy, e.g. `policy_path("billing-charge")`.
pub fn policy_path(name: &str) -> PathBuf {
    policies_dir().join(format!("{name}.wasm"))
}
