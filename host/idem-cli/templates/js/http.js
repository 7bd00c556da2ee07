// `{{name}}`: the `Idempotency-Key` HTTP header (IETF draft): one effect per
// client key and tenant.
//
// - key: tenant and the client's `idempotency_key` (at most 255 bytes);
// - fingerprint: method, path and the body's SHA-256 (`body_sha256`,
//   optional): the same key with another request is refused with 422;
// - partition: the tenant;
// - retention: 24 hours, lease: 60 seconds;
// - duplicates: a request in flight → 409 with retry-after; otherwise
//   Decision.standard (completed → replay the stored response,
//   failed-retryable → re-execute, lease expired → outcome-unknown).
//
// Keep it pure: no clock (`Date.now()` is the build time inside the
// component; the operation's time is `op.nowMs`), no randomness, no Node.js
// API. Test: `npm install` once, then `npm test` (the cases, natively);
// build: `idem build`, then `idem test --policy dist/{{name}}.wasm cases.json`.

import {
  definePolicy,
  Derivation,
  Decision,
  PolicyError,
  RecordState,
  utf8Length,
  DAY,
  MINUTE,
} from '@idem/policy';

const UPPER = /^[A-Z]*$/;
const SHA256_HEX = /^[0-9a-fA-F]{64}$/;

export const policy = definePolicy({
  describe() {
    return {
      name: '{{name}}',
      version: '0.1.0',
      namespace: '{{name}}',
      description: 'One effect per Idempotency-Key and tenant',
    };
  },

  derive(op) {
    if (op.kind !== 'http-request') throw PolicyError.unsupportedKind(op.kind);
    const key = op.text('idempotency_key');
    // Bytes, not UTF-16 units: the bound the draft and the Rust SDK use.
    if (utf8Length(key) > 255) {
      throw PolicyError.invalid('idempotency_key', 'must be at most 255 bytes');
    }
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
