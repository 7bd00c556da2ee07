// `http-idempotency-key` in JavaScript: a port of
// guest/policies/http-idempotency-key (the IETF `Idempotency-Key` HTTP
// header draft), deriving the same parts and decisions, tested against its
// cases.json.
//
// - key: the client's `idempotency_key`, scoped by tenant; a request without
//   one is refused (400, `missing-field`);
// - fingerprint: method, path and the body's digest (`body_sha256`, lower-
//   cased): the same key with another request is refused with 422;
// - in flight → 409 (retry after the lease); completed → replay (also a
//   stored error response); failed-retryable → re-execute;
// - retention 24 hours (the draft's suggestion), lease 60 seconds.

import { definePolicy, Derivation, Decision, PolicyError, RecordState, DAY, MINUTE } from '../../sdk/index.js';
import { utf8Length } from '../../sdk/utf8.js';

const UPPER = /^[A-Z]+$/;
const SHA256_HEX = /^[0-9A-Fa-f]{64}$/;

export const policy = definePolicy({
  describe() {
    return {
      name: 'http-idempotency-key',
      version: '1.0.0',
      namespace: 'http',
      description: 'The IETF Idempotency-Key header: one effect per client key and tenant',
    };
  },

  derive(op) {
    const key = op.text('idempotency_key');
    // 255 UTF-8 bytes, as Rust's `len()`, not 255 UTF-16 units.
    if (utf8Length(key) > 255) throw PolicyError.invalid('idempotency_key', 'must be at most 255 bytes');
    const method = op.text('method');
    if (!UPPER.test(method)) {
      throw PolicyError.invalid('method', 'must be an upper-case HTTP method like POST');
    }
    const path = op.text('path');
    if (!path.startsWith('/')) throw PolicyError.invalid('path', 'must start with /');
    const body = op.optionalText('body_sha256') ?? '';
    if (!(body === '' || SHA256_HEX.test(body))) {
      throw PolicyError.invalid('body_sha256', 'must be 64 hex characters');
    }
    return new Derivation(op.tenant)
      .key('tenant', op.tenant)
      .key('idempotency_key', key)
      .fingerprint('method', method)
      .fingerprint('path', path)
      // Only ASCII hex gets here, so toLowerCase is Rust's to_ascii_lowercase.
      .fingerprint('body_sha256', body.toLowerCase())
      .retentionS(DAY)
      .leaseS(MINUTE);
  },

  onDuplicate(ctx) {
    if (!ctx.fingerprintMatches) {
      return Decision.reject(422, 'Idempotency-Key reused with a different request');
    }
    if (ctx.state === RecordState.InProgress && ctx.leaseRemainingMs > 0) {
      return Decision.reject(409, 'a request with this Idempotency-Key is in flight', ctx.leaseRemainingMs);
    }
    return Decision.standard(ctx);
  },
});
