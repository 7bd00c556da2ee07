"""`http-idempotency-key`, ported from guest/policies/http-idempotency-key: the
IETF `Idempotency-Key` HTTP header draft.

- key: the client's `idempotency_key`, scoped by tenant; a request without one
  is refused (400, missing-field);
- fingerprint: method, path and the body's digest (`body_sha256`): the same
  key with another request is refused with 422;
- in flight → 409 (retry after the lease); completed → replay;
  failed-retryable → re-execute; retention 24 hours, lease 60 seconds.
"""

from idem_policy import (
    DAY,
    MINUTE,
    Decision,
    Derivation,
    Policy,
    PolicyError,
    PolicyInfo,
    RecordState,
    export,
)

_UPPER = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZ")
_HEX = frozenset("0123456789abcdefABCDEF")


class HttpIdempotencyKey(Policy):
    def describe(self):
        return PolicyInfo(
            "http-idempotency-key",
            "1.0.0",
            "http",
            "The IETF Idempotency-Key header: one effect per client key and tenant",
        )

    def derive(self, op):
        key = op.text("idempotency_key")
        # The draft's bound is on bytes, as the Rust policy's `len()`.
        if len(key.encode("utf-8")) > 255:
            raise PolicyError.invalid("idempotency_key", "must be at most 255 bytes")
        method = op.text("method")
        if not all(c in _UPPER for c in method):
            raise PolicyError.invalid("method", "must be an upper-case HTTP method like POST")
        path = op.text("path")
        if not path.startswith("/"):
            raise PolicyError.invalid("path", "must start with /")
        body = op.optional_text("body_sha256") or ""
        if not (body == "" or (len(body) == 64 and all(c in _HEX for c in body))):
            raise PolicyError.invalid("body_sha256", "must be 64 hex characters")
        return (
            Derivation(op.tenant)
            .key("tenant", op.tenant)
            .key("idempotency_key", key)
            .fingerprint("method", method)
            .fingerprint("path", path)
            # Only ASCII hex is left here, so lower() is Rust's to_ascii_lowercase.
            .fingerprint("body_sha256", body.lower())
            .retention_s(DAY)
            .lease_s(MINUTE)
        )

    def on_duplicate(self, ctx):
        if not ctx.fingerprint_matches:
            return Decision.reject(422, "Idempotency-Key reused with a different request")
        if ctx.state is RecordState.IN_PROGRESS and ctx.lease_remaining_ms > 0:
            return Decision.reject(
                409,
                "a request with this Idempotency-Key is in flight",
                retry_after_ms=ctx.lease_remaining_ms,
            )
        return Decision.standard(ctx)


Policy = export(HttpIdempotencyKey)
