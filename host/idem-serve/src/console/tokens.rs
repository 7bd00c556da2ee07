//! The console's tokens, made with HMAC-SHA256 and checked in constant
//! time: a settle form's token (bound to the caller's secret, one record
//! and one fence) and the key a session is held under (so that looking a
//! session up never compares a caller's bytes with a live session id).
//!
//! A MAC, not a hash of a secret followed by data: SHA-256 of `secret ‖
//! data` can be extended by anyone who saw one token (a length-extension
//! attack), and each part is framed by its length below so that two
//! different (key, fence) pairs never sign the same bytes.

use hmac::{Hmac, KeyInit, Mac};
use idem::store::RecordKey;
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// A MAC under `secret` over a label and parts, each framed by its length.
fn mac(secret: &[u8; 32], label: &str, parts: &[&[u8]]) -> HmacSha256 {
    let mut mac = HmacSha256::new_from_slice(secret).expect("HMAC takes a key of any length");
    for part in std::iter::once(label.as_bytes()).chain(parts.iter().copied()) {
        mac.update(&(part.len() as u64).to_be_bytes());
        mac.update(part);
    }
    mac
}

/// The bytes a form token signs: the record's key and the fence the page
/// showed.
fn form_parts(key: &RecordKey, fence: u64) -> [Vec<u8>; 2] {
    [key.to_string().into_bytes(), fence.to_string().into_bytes()]
}

/// The token a settle form carries, in lower-case hex.
pub(crate) fn form_token(secret: &[u8; 32], key: &RecordKey, fence: u64) -> String {
    let [k, f] = form_parts(key, fence);
    hex(&mac(secret, "form", &[&k, &f]).finalize().into_bytes())
}

/// Whether `given` is the form token for `key` at `fence` under `secret`,
/// compared in constant time (hmac's `verify_slice`).
pub(crate) fn form_token_matches(
    secret: &[u8; 32],
    key: &RecordKey,
    fence: u64,
    given: &str,
) -> bool {
    let Some(given) = unhex(given) else {
        return false;
    };
    let [k, f] = form_parts(key, fence);
    mac(secret, "form", &[&k, &f]).verify_slice(&given).is_ok()
}

/// The key a session with cookie value `id` is kept under.
pub(crate) fn session_key(secret: &[u8; 32], id: &str) -> [u8; 32] {
    let mut out = [0u8; 32];
    out.copy_from_slice(
        &mac(secret, "session", &[id.as_bytes()])
            .finalize()
            .into_bytes(),
    );
    out
}

/// Bytes as lower-case hex.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Lower-case or upper-case hex as bytes; `None` for anything else.
fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use idem::store::Digest;

    fn key(n: u8) -> RecordKey {
        RecordKey::new(
            "billing",
            Digest::from_hex(&format!("{n:02x}").repeat(32)).unwrap(),
        )
    }

    #[test]
    fn a_form_token_is_bound_to_its_secret_record_and_fence() {
        let (secret, other) = ([7u8; 32], [8u8; 32]);
        let token = form_token(&secret, &key(1), 5);
        assert_eq!(token.len(), 64);
        assert!(form_token_matches(&secret, &key(1), 5, &token));
        assert!(!form_token_matches(&other, &key(1), 5, &token));
        assert!(!form_token_matches(&secret, &key(2), 5, &token));
        assert!(!form_token_matches(&secret, &key(1), 6, &token));
        // Tampered: one character changed, cut short, extended, not hex.
        let mut flipped = token.clone().into_bytes();
        flipped[10] = if flipped[10] == b'0' { b'1' } else { b'0' };
        let flipped = String::from_utf8(flipped).unwrap();
        for bad in [&flipped, &token[..62], &format!("{token}00"), "zz", ""] {
            assert!(!form_token_matches(&secret, &key(1), 5, bad), "{bad}");
        }
    }

    #[test]
    fn session_keys_differ_by_id_and_secret() {
        let a = session_key(&[1u8; 32], "abc");
        assert_eq!(a, session_key(&[1u8; 32], "abc"));
        assert_ne!(a, session_key(&[1u8; 32], "abd"));
        assert_ne!(a, session_key(&[2u8; 32], "abc"));
    }
}
