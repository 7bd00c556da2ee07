//! What a policy derives from an operation, the checks it must pass, and the
//! keys the host makes of it.

use serde::Serialize;
use thiserror::Error;

use crate::digest::{Digest, Domain, Part};

/// Who a policy is, as it describes itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PolicyInfo {
    /// Short, stable name, e.g. `billing-charge` (1 to 128 bytes).
    pub name: String,
    /// Semantic version of the policy, e.g. `1.2.0`.
    pub version: String,
    /// Key namespace: keys of different namespaces never collide (1 to 128
    /// bytes).
    pub namespace: String,
    /// One line saying what the policy is for (at most 1024 bytes).
    pub description: String,
}

impl PolicyInfo {
    /// Checks what the host relies on: a non-empty name and namespace and a
    /// semantic version.
    pub fn validate(&self) -> Result<(), DerivationError> {
        let bad = |why: String| Err(DerivationError::Malformed(why));
        if self.name.is_empty() || self.name.len() > 128 {
            return bad(format!(
                "policy name must be 1 to 128 bytes, got {:?}",
                crate::text::bounded(&self.name, 64)
            ));
        }
        if self.namespace.is_empty() || self.namespace.len() > 128 {
            return bad(format!(
                "policy namespace must be 1 to 128 bytes, got {:?}",
                crate::text::bounded(&self.namespace, 64)
            ));
        }
        if !is_semver(&self.version) {
            return bad(format!(
                "policy version {:?} is not a semantic version (like 1.2.0)",
                crate::text::bounded(&self.version, 64)
            ));
        }
        if self.description.len() > 1024 {
            return bad("policy description is longer than 1024 bytes".into());
        }
        Ok(())
    }
}

fn is_semver(v: &str) -> bool {
    let core = v.split(['-', '+']).next().unwrap_or("");
    let nums: Vec<&str> = core.split('.').collect();
    nums.len() == 3
        && nums.iter().all(|n| {
            !n.is_empty()
                && n.bytes().all(|b| b.is_ascii_digit())
                && (n.len() == 1 || !n.starts_with('0'))
        })
}

/// A policy's derivation, as it returned it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Derivation {
    /// Identifies the effect: the same parts mean the same effect. Must
    /// have at least one part.
    pub key: Vec<Part>,
    /// What must match for a duplicate to be a true replay. May be empty.
    pub fingerprint: Vec<Part>,
    /// Who owns the effect, for partitioned ownership (e.g. the customer).
    pub partition: String,
    /// How long a record is kept, in seconds; must be at least `lease_s`.
    pub retention_s: u64,
    /// How long a claim holds before its lease expires, in seconds.
    pub lease_s: u32,
}

/// Bounds on what a derivation may contain. A policy that exceeds them is
/// broken, and gets no key.
pub mod bounds {
    /// Most parts in the key or in the fingerprint.
    pub const MAX_PARTS: usize = 32;
    /// Longest part name.
    pub const MAX_PART_NAME: usize = 64;
    /// Most bytes of material (names and values) in the key or the fingerprint.
    pub const MAX_MATERIAL: usize = 8 * 1024;
    /// Longest partition key.
    pub const MAX_PARTITION: usize = 512;
    /// Longest lease: one day. A longer lease hides a dead holder too long.
    pub const MAX_LEASE_S: u32 = 24 * 3600;
    /// Longest retention: ten years.
    pub const MAX_RETENTION_S: u64 = 10 * 366 * 24 * 3600;
}

/// Why a derivation is refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum DerivationError {
    /// The policy returned something the contract does not allow.
    #[error("policy returned a malformed derivation: {0}")]
    Malformed(String),
}

/// A checked derivation with its keys: what the engine claims with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyedDerivation {
    /// The policy's namespace, hashed into both digests.
    pub namespace: String,
    /// The key: the digest of `key_material` in the key domain.
    pub key: Digest,
    /// The digest of `fingerprint_material` in the fingerprint domain.
    pub fingerprint: Digest,
    /// The key parts, in the policy's order (for `--explain`).
    pub key_material: Vec<Part>,
    /// The fingerprint parts, in the policy's order.
    pub fingerprint_material: Vec<Part>,
    /// Who owns the effect (1 to [`bounds::MAX_PARTITION`] bytes).
    pub partition: String,
    /// How long the record is kept, in seconds; never shorter than the lease.
    pub retention_s: u64,
    /// How long a claim holds before its lease expires, in seconds.
    pub lease_s: u32,
}

impl Derivation {
    /// Checks the derivation against [`bounds`] and computes its key and
    /// fingerprint under `namespace`.
    pub fn finish(self, namespace: &str) -> Result<KeyedDerivation, DerivationError> {
        check_parts("key", &self.key, false)?;
        check_parts("fingerprint", &self.fingerprint, true)?;
        let bad = |why: String| Err(DerivationError::Malformed(why));
        if self.partition.is_empty() || self.partition.len() > bounds::MAX_PARTITION {
            return bad(format!(
                "partition must be 1 to {} bytes",
                bounds::MAX_PARTITION
            ));
        }
        if self.lease_s == 0 || self.lease_s > bounds::MAX_LEASE_S {
            return bad(format!(
                "lease_s must be 1 to {} seconds, got {}",
                bounds::MAX_LEASE_S,
                self.lease_s
            ));
        }
        if self.retention_s == 0 || self.retention_s > bounds::MAX_RETENTION_S {
            return bad(format!(
                "retention_s must be 1 to {} seconds, got {}",
                bounds::MAX_RETENTION_S,
                self.retention_s
            ));
        }
        if self.retention_s < u64::from(self.lease_s) {
            return bad(format!(
                "retention_s ({}) is shorter than lease_s ({}): a record would vanish while claimed",
                self.retention_s, self.lease_s
            ));
        }
        Ok(KeyedDerivation {
            namespace: namespace.to_string(),
            key: Digest::of(Domain::Key, namespace, &self.key),
            fingerprint: Digest::of(Domain::Fingerprint, namespace, &self.fingerprint),
            key_material: self.key,
            fingerprint_material: self.fingerprint,
            partition: self.partition,
            retention_s: self.retention_s,
            lease_s: self.lease_s,
        })
    }
}

fn check_parts(what: &str, parts: &[Part], may_be_empty: bool) -> Result<(), DerivationError> {
    let bad = |why: String| Err(DerivationError::Malformed(why));
    if parts.is_empty() && !may_be_empty {
        return bad(format!(
            "{what} has no parts: every operation would share one key"
        ));
    }
    if parts.len() > bounds::MAX_PARTS {
        return bad(format!(
            "{what} has {} parts; the limit is {}",
            parts.len(),
            bounds::MAX_PARTS
        ));
    }
    let mut material = 0usize;
    for (i, part) in parts.iter().enumerate() {
        if part.name.is_empty() || part.name.len() > bounds::MAX_PART_NAME {
            return bad(format!(
                "{what} part {i} has a name of {} bytes (1 to {})",
                part.name.len(),
                bounds::MAX_PART_NAME
            ));
        }
        if parts[..i].iter().any(|p| p.name == part.name) {
            return bad(format!("{what} part `{}` appears twice", part.name));
        }
        material += part.name.len() + part.value.len();
    }
    if material > bounds::MAX_MATERIAL {
        return bad(format!(
            "{what} material is {material} bytes; the limit is {}",
            bounds::MAX_MATERIAL
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Derivation {
        Derivation {
            key: vec![Part::new("customer", "c1"), Part::new("invoice_id", "i1")],
            fingerprint: vec![Part::new("amount", "100")],
            partition: "c1".into(),
            retention_s: 3600,
            lease_s: 60,
        }
    }

    #[test]
    fn finishes_a_good_derivation() {
        let k = sample().finish("billing").unwrap();
        assert_eq!(k.key, Digest::of(Domain::Key, "billing", &sample().key));
        assert_ne!(k.key, k.fingerprint);
    }

    #[test]
    fn refuses_malformed_derivations() {
        type Mutation = fn(&mut Derivation);
        let cases: Vec<(Mutation, &str)> = vec![
            (|d| d.key.clear(), "key has no parts"),
            (|d| d.key.push(Part::new("customer", "x")), "appears twice"),
            (|d| d.key[0].name.clear(), "part 0 has a name of 0 bytes"),
            (|d| d.partition.clear(), "partition"),
            (|d| d.lease_s = 0, "lease_s"),
            (|d| d.retention_s = 0, "retention_s"),
            (|d| d.retention_s = 10, "shorter than lease_s"),
            (
                |d| d.fingerprint = vec![Part::new("blob", "x".repeat(9000))],
                "material is",
            ),
            (
                |d| d.key = (0..33).map(|i| Part::new(format!("p{i}"), "v")).collect(),
                "33 parts",
            ),
        ];
        for (mutate, needle) in cases {
            let mut d = sample();
            mutate(&mut d);
            let err = d.finish("billing").unwrap_err().to_string();
            assert!(err.contains(needle), "{needle}: {err}");
        }
    }

    #[test]
    fn policy_info_needs_semver() {
        let mut info = PolicyInfo {
            name: "p".into(),
            version: "1.0.0".into(),
            namespace: "n".into(),
            description: "d".into(),
        };
        assert!(info.validate().is_ok());
        info.version = "1.0.0-rc.1".into();
        assert!(info.validate().is_ok());
        for bad in ["1.0", "v1.0.0", "01.0.0", ""] {
            info.version = bad.into();
            assert!(info.validate().is_err(), "{bad}");
        }
    }
}
