// The module a QuickJS component (`idem build --js-engine quickjs`) is made
// of: the prelude, then the policy's bundle (the same bundle componentize-js
// gets), whose `policy` it exports with the values converted between the two
// engines' shapes, so the same SDK and the same source derive the same keys.
//
// componentize-qjs carries a u64 as a Number and an absent option as `null`;
// componentize-js, which the SDK is written to, a BigInt and `undefined`.
// In, the host's records get componentize-js's shapes; out, the SDK's u64
// BigInts become Numbers (a value beyond 2^53 - 1 cannot cross exactly, and
// fails the call saying so). A refusal (a thrown policy-error record) and
// any other exception pass through as they are.

import './prelude.js';
import { policy as inner } from './policy.bundle.js';

const FAILING = Symbol.for('idem.policy.failing');

/** @param {unknown} v */
const none = (v) => (v === null ? undefined : v);
/**
 * A u64 on its way in, as a BigInt. Past 2^53 - 1 the Number it came as may
 * already be rounded: the call fails rather than derive from a value the
 * host did not send (StarlingMonkey would see the exact one).
 * @param {unknown} v
 * @param {string} what
 */
function big(v, what) {
  if (typeof v !== 'number') return v;
  if (v > Number.MAX_SAFE_INTEGER) fail(new RangeError(`${what} is ${v}: a QuickJS component carries a u64 up to 2^53 - 1 only`));
  return BigInt(v);
}

/** @param {Error} e */
function fail(e) {
  const failing = globalThis[FAILING];
  if (typeof failing === 'function') failing(`${e.name}: ${e.message}`);
  throw e;
}

/**
 * A u64 on its way out, as a Number.
 * @param {unknown} v
 * @param {string} what
 */
function u64Out(v, what) {
  if (typeof v !== 'bigint') return v;
  if (v > BigInt(Number.MAX_SAFE_INTEGER)) fail(new RangeError(`${what} is ${v}: a QuickJS component carries a u64 up to 2^53 - 1 only`));
  return Number(v);
}

function operationIn(op) {
  return { kind: op.kind, tenant: op.tenant, fields: op.fields, run: none(op.run), nowMs: big(op.nowMs, 'now-ms') };
}

function contextIn(ctx) {
  const outcome = none(ctx.outcome);
  return {
    operation: operationIn(ctx.operation),
    state: ctx.state,
    fingerprintMatches: ctx.fingerprintMatches,
    attempts: ctx.attempts,
    ageMs: big(ctx.ageMs, 'age-ms'),
    leaseRemainingMs: big(ctx.leaseRemainingMs, 'lease-remaining-ms'),
    outcome: outcome === undefined ? undefined : { status: outcome.status, size: big(outcome.size, 'size'), error: none(outcome.error) },
  };
}

function derivationOut(d) {
  if (typeof d !== 'object' || d === null) return d;
  return { ...d, retentionS: u64Out(d.retentionS, 'retention-s') };
}

function rejectionOut(r) {
  if (typeof r !== 'object' || r === null) return r;
  return { ...r, retryAfterMs: u64Out(r.retryAfterMs, 'retry-after-ms') };
}

function decisionOut(d) {
  if (typeof d !== 'object' || d === null) return d;
  switch (d.tag) {
    case 'wait':
      return { tag: 'wait', val: u64Out(d.val, 'wait') };
    case 'reject':
    case 'mark-unknown':
      return { tag: d.tag, val: rejectionOut(d.val) };
    default:
      return d;
  }
}

export const policy = {
  describe: () => inner.describe(),
  derive: (op) => derivationOut(inner.derive(operationIn(op))),
  onDuplicate: (ctx) => decisionOut(inner.onDuplicate(contextIn(ctx))),
};
