"""`{{name}}`: the `Idempotency-Key` HTTP header (IETF draft): one effect per
client key and tenant.

- key: tenant and the client's `idempotency_key` (at most 255 bytes);
- fingerprint: method, path and the body's SHA-256 (`body_sha256`,
  optional): the same key with another request is refused with 422;
- partition: the tenant;
- retention: 24 hours, lease: 60 seconds;
- duplicates: a request in flight → 409 with retry-after; otherwise
  Decision.standard (completed → replay the stored response,
  failed-retryable → re-execute, lease expired → outcome-unknown).

Keep it pure: inside the component time.time() and open() trap, and
random.random() and hash() of a string are fixed at build time (different
in every build); the operation's time is op.now_ms. Test natively with
`python3 -m idem_policy.cases . cases.json`; build with `idem build`.
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


class {{Type}}(Policy):
    def describe(self):
        return PolicyInfo(
            "{{name}}",
            "0.1.0",
            "{{name}}",
            "One effect per Idempotency-Key and tenant",
        )

    def derive(self, op):
        if op.kind != "http-request":
            raise PolicyError.unsupported_kind(op.kind)
        key = op.text("idempotency_key")
        # Bytes, as the draft and the Rust SDK count them.
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
            .fingerprint("body_sha256", body.lower())
            .retention_s(DAY)
            .lease_s(MINUTE)
        )

    def on_duplicate(self, ctx):
        if not ctx.fingerprint_matches:
            return Decision.reject(422, "Idempotency-Key reused with a different request")
        if ctx.state == RecordState.IN_PROGRESS and ctx.lease_remaining_ms > 0:
            return Decision.reject(
                409,
                "a request with this Idempotency-Key is in flight",
                retry_after_ms=ctx.lease_remaining_ms,
            )
        return Decision.standard(ctx)


Policy = export({{Type}})
