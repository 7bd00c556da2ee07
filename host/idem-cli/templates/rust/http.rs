//! `{{name}}`: the `Idempotency-Key` HTTP header (IETF draft): one effect
//! per client key and tenant.
//!
//! - key: tenant and the client's `idempotency_key` (at most 255 bytes);
//! - fingerprint: method, path and the body's SHA-256 (`body_sha256`,
//!   optional): the same key with another request is refused with 422;
//! - partition: the tenant;
//! - retention: 24 hours, lease: 60 seconds;
//! - duplicates: a request in flight → 409 with retry-after; otherwise
//!   `Decision::standard` (completed → replay the stored response,
//!   failed-retryable → re-execute, lease expired → outcome-unknown).
//!
//! Build and test: `idem build` then `idem test --policy <the .wasm it
//! printed> cases.json`; `cargo test` runs the same cases natively.

use idem_policy::*;

/// The policy.
pub struct {{Type}};

impl Policy for {{Type}} {
    fn describe() -> PolicyInfo {
        PolicyInfo::new(
            "{{name}}",
            "0.1.0",
            "{{name}}",
            "One effect per Idempotency-Key and tenant",
        )
    }

    fn derive(op: &Operation) -> Result<Derivation, PolicyError> {
        if op.kind != "http-request" {
            return Err(PolicyError::unsupported_kind(&op.kind));
        }
        let key = op.text("idempotency_key")?;
        if key.len() > 255 {
            return Err(PolicyError::invalid(
                "idempotency_key",
                "must be at most 255 bytes",
            ));
        }
        let method = op.text("method")?;
        if !method.bytes().all(|b| b.is_ascii_uppercase()) {
            return Err(PolicyError::invalid(
                "method",
                "must be an upper-case HTTP method like POST",
            ));
        }
        let path = op.text("path")?;
        if !path.starts_with('/') {
            return Err(PolicyError::invalid("path", "must start with /"));
        }
        let body = op.optional_text("body_sha256")?.unwrap_or("");
        if !(body.is_empty() || (body.len() == 64 && body.bytes().all(|b| b.is_ascii_hexdigit()))) {
            return Err(PolicyError::invalid(
                "body_sha256",
                "must be 64 hex characters",
            ));
        }
        Ok(Derivation::new(&op.tenant)
            .key("tenant", &op.tenant)
            .key("idempotency_key", key)
            .fingerprint("method", method)
            .fingerprint("path", path)
            .fingerprint("body_sha256", &body.to_ascii_lowercase())
            .retention_s(DAY)
            .lease_s(MINUTE as u32))
    }

    fn on_duplicate(ctx: &DuplicateContext) -> Decision {
        if !ctx.fingerprint_matches {
            return Decision::reject(422, "Idempotency-Key reused with a different request");
        }
        match ctx.state {
            RecordState::InProgress if ctx.lease_remaining_ms > 0 => Decision::Reject(
                Rejection::new(409, "a request with this Idempotency-Key is in flight")
                    .retry_after_ms(ctx.lease_remaining_ms),
            ),
            _ => Decision::standard(ctx),
        }
    }
}

export_policy!({{Type}});

#[cfg(test)]
mod tests {
    /// The cases, natively: fast, and a failing case's panic is readable.
    #[test]
    fn cases() {
        idem_policy::testing::assert_cases::<super::{{Type}}>("cases.json");
    }

    /// The same cases against the built component, in the host (needs
    /// `idem` on PATH or in IDEM_BIN): what the host will run.
    #[test]
    fn cases_in_the_host() {
        idem_policy::testing::assert_cases_in_host("cases.json");
    }
}
