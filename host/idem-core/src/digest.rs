//! How key and fingerprint material become keys.
//!
//! The host, never a policy, does this, so that keys are uniform across teams
//! and every key can be explained part by part. A digest is SHA-256 over:
//!
//! ```text
//! u32be(encoding version = 1)
//! lp(domain)        "key" or "fingerprint": the two never collide
//! lp(namespace)     the policy's namespace
//! u32be(part count)
//! lp(name) lp(value) for each part, in the policy's order
//! ```
//!
//! where `lp(x)` is `u32be(len(x))` followed by the UTF-8 bytes of `x`. The
//! length prefixes make the encoding injective: `("ab","c")` and `("a","bc")`
//! can never share a key.

use std::fmt;

use serde::Serialize;
use sha2::{Digest as _, Sha256};

/// The version of the encoding above. Changing the encoding changes every key,
/// so it is versioned and hashed in.
pub const KEY_ENCODING_VERSION: u32 = 1;

/// One named piece of key or fingerprint material: the unit the encoding
/// above hashes. It lives here, below [`crate::derivation`], so that the
/// encoding depends on nothing but its own input and the derivation (which
/// builds parts and checks them) depends on the encoding, never the reverse.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct Part {
    /// What the part is, e.g. `invoice_id`; unique within its list.
    pub name: String,
    /// The material itself, e.g. a field's value.
    pub value: String,
}

impl Part {
    /// A part from a name and a value.
    pub fn new(name: impl Into<String>, value: impl Into<String>) -> Self {
        Part {
            name: name.into(),
            value: value.into(),
        }
    }
}

// Exhaustive on purpose (not `#[non_exhaustive]`): the key encoding (KEY_ENCODING_VERSION) has
// exactly these two domains; another would be a new encoding.
/// What a digest is of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Domain {
    /// Key material: identifies the effect. Labelled `key` in the encoding.
    Key,
    /// Fingerprint material: what must match for a duplicate to be a true
    /// replay. Labelled `fingerprint` in the encoding.
    Fingerprint,
}

impl Domain {
    fn label(self) -> &'static str {
        match self {
            Domain::Key => "key",
            Domain::Fingerprint => "fingerprint",
        }
    }
}

/// A SHA-256 digest, shown as 64 lowercase hex characters.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest(pub [u8; 32]);

impl Digest {
    /// The digest of `parts` in `domain` under `namespace`.
    pub fn of(domain: Domain, namespace: &str, parts: &[Part]) -> Self {
        Digest(Sha256::digest(encode(domain, namespace, parts)).into())
    }

    /// SHA-256 of arbitrary bytes (policy digests, outcome digests).
    pub fn of_bytes(bytes: &[u8]) -> Self {
        Digest(Sha256::digest(bytes).into())
    }

    /// 64 lowercase hex characters.
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    /// Parses 64 hex characters.
    pub fn from_hex(text: &str) -> Option<Self> {
        let mut out = [0u8; 32];
        hex::decode_to_slice(text, &mut out).ok()?;
        Some(Digest(out))
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Digest({})", self.to_hex())
    }
}

/// The exact bytes that are hashed (exposed for `--explain` and tests).
pub fn encode(domain: Domain, namespace: &str, parts: &[Part]) -> Vec<u8> {
    fn lp(out: &mut Vec<u8>, s: &str) {
        let len = u32::try_from(s.len()).expect("material is bounded far below 4 GiB");
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(s.as_bytes());
    }
    let mut out = Vec::with_capacity(
        64 + parts
            .iter()
            .map(|p| 8 + p.name.len() + p.value.len())
            .sum::<usize>(),
    );
    out.extend_from_slice(&KEY_ENCODING_VERSION.to_be_bytes());
    lp(&mut out, domain.label());
    lp(&mut out, namespace);
    let count = u32::try_from(parts.len()).expect("part count is bounded");
    out.extend_from_slice(&count.to_be_bytes());
    for part in parts {
        lp(&mut out, &part.name);
        lp(&mut out, &part.value);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(name: &str, value: &str) -> Part {
        Part {
            name: name.into(),
            value: value.into(),
        }
    }

    #[test]
    fn golden_vector() {
        // Pinned, and computed independently (Python's hashlib over the documented
        // encoding): changing this digest changes every key ever issued.
        let d = Digest::of(
            Domain::Key,
            "billing",
            &[part("customer", "c1"), part("invoice_id", "i1")],
        );
        assert_eq!(
            d.to_hex(),
            "e769850ffcf82c59c0e32bab9ea257cbd9e491e2c2ef1ab972dbe45f4fab2961"
        );
    }

    #[test]
    fn length_prefixes_keep_boundaries() {
        let a = Digest::of(Domain::Key, "ns", &[part("a", "bc")]);
        let b = Digest::of(Domain::Key, "ns", &[part("ab", "c")]);
        assert_ne!(a, b);
        let c = Digest::of(Domain::Key, "ns", &[part("a", "b"), part("c", "d")]);
        let d = Digest::of(
            Domain::Key,
            "ns",
            &[part("a", "b\0\0\0\u{1}c"), part("", "d")],
        );
        assert_ne!(c, d);
    }

    #[test]
    fn domains_and_namespaces_separate() {
        let parts = [part("x", "1")];
        assert_ne!(
            Digest::of(Domain::Key, "ns", &parts),
            Digest::of(Domain::Fingerprint, "ns", &parts)
        );
        assert_ne!(
            Digest::of(Domain::Key, "ns", &parts),
            Digest::of(Domain::Key, "ns2", &parts)
        );
    }

    #[test]
    fn hex_round_trips() {
        let d = Digest::of_bytes(b"idem");
        assert_eq!(Digest::from_hex(&d.to_hex()), Some(d));
        assert_eq!(Digest::from_hex("zz"), None);
    }
}
