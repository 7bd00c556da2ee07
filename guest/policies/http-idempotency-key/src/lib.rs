//! `http-idempotency-key`: the IETF `Idempotency-Key` HTTP header draft.
//!
//! - key: the client's `idempotency_key`, scoped by tenant; a request without
//!   one is refused (400, `missing-field`);
//! - fingerprint: method, path and the body's digest (`body_sha256`): the
//!   same key with another request is refused with 422;
//! - in flight → 409 (retry after the lease); completed → replay the stored
//!   response (also a stored error response); failed-retryable → re-execute;
//! - retention 24 hours (the draft's suggestion), lease 60 seconds.

use idem_policy::*;

/// The http-idempotency-key policy.
pub struct HttpIdempotencyKey;

impl Policy for HttpIdempotencyKey {
    fn describe() -> PolicyInfo {
        PolicyInfo::new(
            "http-idempotency-key",
            "1.0.0",
            "http",
            "The IETF Idempotency-Key header: one effect per client key and tenant",
        )
    }

    fn derive(op: &Operation) -> Result<Derivation, PolicyError> {
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

export_policy!(HttpIdempotencyKey);

#[cfg(test)]
mod tests {
    #[test]
    fn cases_pass_natively() {
        idem_policy::testing::assert_cases::<super::HttpIdempotencyKey>("cases.json");
    }
}
