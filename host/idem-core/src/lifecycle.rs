//! What a policy says about its own life beside its code: the lifecycle
//! manifest and the golden vectors a component may carry as custom
//! sections (the host reads them; the policy's code never sees them).
//!
//! - `idem-lifecycle`: a JSON [`Lifecycle`] — whether records may keep the
//!   canonical operation, and which earlier version this one replaces.
//! - `idem-cases`: a cases file ([`crate::cases::CasesFile`]), the same
//!   file `idem test` runs: the activation gate runs it before a version
//!   becomes active.
//!
//! `idem build` adds both from the policy crate (`[package.metadata.idem]`
//! in its `Cargo.toml`, and a `cases.json` beside it). They are part of the
//! component's bytes, so of its digest: a manifest cannot be changed
//! without changing the policy's identity.

use serde::{Deserialize, Serialize};

/// The custom section holding the [`Lifecycle`] manifest.
pub const LIFECYCLE_SECTION: &str = "idem-lifecycle";

/// The custom section holding the policy's golden vectors (a cases file).
pub const CASES_SECTION: &str = "idem-cases";

/// Largest manifest read, in bytes.
pub const MAX_LIFECYCLE_BYTES: usize = 4096;

/// A policy's lifecycle manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Lifecycle {
    /// Whether records keep the canonical operation (default: yes). A
    /// policy whose operations carry fields that must not sit in a store
    /// says `false`; its records cannot be diffed, so an activation cannot
    /// show that an upgrade keeps their keys.
    #[serde(default = "yes")]
    pub keep_operations: bool,
    /// The digest (`sha256:<64 hex>`) of the version this one replaces:
    /// during the migration window a claim also looks up the key that
    /// version derives, so a duplicate across the upgrade is still caught.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replaces: Option<String>,
}

fn yes() -> bool {
    true
}

impl Default for Lifecycle {
    fn default() -> Self {
        Lifecycle {
            keep_operations: true,
            replaces: None,
        }
    }
}

impl Lifecycle {
    /// Reads a manifest, checking `replaces` is a policy digest.
    pub fn from_json(bytes: &[u8]) -> Result<Self, String> {
        if bytes.len() > MAX_LIFECYCLE_BYTES {
            return Err(format!(
                "the manifest is {} bytes; at most {MAX_LIFECYCLE_BYTES}",
                bytes.len()
            ));
        }
        let manifest: Lifecycle = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
        if let Some(digest) = &manifest.replaces
            && !is_policy_digest(digest)
        {
            return Err(format!(
                "`replaces` is `{}`, not `sha256:` and 64 lowercase hex characters",
                crate::text::bounded(digest, 80)
            ));
        }
        Ok(manifest)
    }
}

/// Whether `text` is a policy digest: `sha256:` and 64 lowercase hex.
pub fn is_policy_digest(text: &str) -> bool {
    text.strip_prefix("sha256:")
        .is_some_and(|h| h.len() == 64 && h.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_manifest_and_its_defaults() {
        assert_eq!(Lifecycle::from_json(b"{}").unwrap(), Lifecycle::default());
        let d = format!("sha256:{}", "ab".repeat(32));
        let m = Lifecycle::from_json(
            format!(r#"{{"keep-operations":false,"replaces":"{d}"}}"#).as_bytes(),
        )
        .unwrap();
        assert!(!m.keep_operations);
        assert_eq!(m.replaces.as_deref(), Some(d.as_str()));
    }

    #[test]
    fn refuses_unknown_members_and_bad_digests() {
        assert!(Lifecycle::from_json(br#"{"keep_operation":false}"#).is_err());
        let err = Lifecycle::from_json(br#"{"replaces":"md5:00"}"#).unwrap_err();
        assert!(err.contains("md5:00"), "{err}");
        assert!(Lifecycle::from_json(&vec![b' '; MAX_LIFECYCLE_BYTES + 1]).is_err());
    }
}
