// The component boundary, natively: what the host hands a policy (records
// shaped as componentize-js lifts them: camelCase members, u64 as BigInt,
// variants as `{ tag, val }`, a missing option as `undefined`) and what it
// takes back, checked as the canonical ABI would lower it, so a value that
// would trap inside the component fails its case here instead of passing.
// Measured under componentize-js 0.23.0 (guest/js/tests/fixtures/probe-policy.js):
// a thrown `Error` traps; a thrown non-Error object, or an Error with an own
// `payload`, is `result`'s error; a u64 may be returned as a Number.

import { describeThrown } from './frames.js';

const U64_MAX = (1n << 64n) - 1n;
const ERROR_CODES = ['missing-field', 'invalid-value', 'unsupported-kind'];
export const DECISIONS = ['replay', 'reject', 'wait', 're-execute', 'mark-unknown'];

/** A value the contract cannot carry, or a thrown exception: a trap in the host. */
export class TrapError extends Error {
  constructor(message) {
    super(message);
    this.name = 'TrapError';
  }
}

/** @param {import('./operation.js').HostOperation} op */
export function toGuestOperation(op) {
  return {
    kind: op.kind,
    tenant: op.tenant,
    fields: op.fields.map(([name, value]) => ({ name, value: { ...value } })),
    run: op.run && { ...op.run },
    nowMs: op.nowMs ?? 0n,
  };
}

const bad = (call, what) => new TrapError(`the policy's ${call} returned ${what}, which the contract cannot carry (in the host: a trap)`);

function str(call, what, v) {
  if (typeof v !== 'string') throw bad(call, `a ${typeof v} as ${what}`);
  return v;
}

function uint(call, what, v, max) {
  const ok =
    (typeof v === 'bigint' && v >= 0n && v <= max) ||
    (typeof v === 'number' && Number.isSafeInteger(v) && v >= 0 && BigInt(v) <= max);
  if (!ok) throw bad(call, `${String(v)} (${typeof v}) as ${what}`);
  return BigInt(v);
}

function opt(v, lift) {
  return v === undefined || v === null ? undefined : lift(v);
}

/** @returns {{ name: string, version: string, namespace: string, description: string }} */
export function liftPolicyInfo(v) {
  if (typeof v !== 'object' || v === null) throw bad('describe', String(v));
  const s = (k) => str('describe', k, v[k]);
  return { name: s('name'), version: s('version'), namespace: s('namespace'), description: s('description') };
}

/** @returns {import('./derivation.js').Derivation} */
export function liftDerivation(v) {
  const call = 'derive';
  if (typeof v !== 'object' || v === null) throw bad(call, String(v));
  const parts = (list) => {
    if (!Array.isArray(v[list])) throw bad(call, `a ${typeof v[list]} as ${list}`);
    return v[list].map((p, i) => ({ name: str(call, `${list}[${i}].name`, p?.name), value: str(call, `${list}[${i}].value`, p?.value) }));
  };
  return {
    key: parts('key'),
    fingerprint: parts('fingerprint'),
    partition: str(call, 'partition', v.partition),
    retentionS: uint(call, 'retentionS', v.retentionS, U64_MAX),
    leaseS: Number(uint(call, 'leaseS', v.leaseS, 0xffff_ffffn)),
  };
}

/** What a thrown value from `derive` is: the policy's typed refusal, or a trap. */
export function liftThrown(e) {
  let payload = e;
  if (e !== null && typeof e === 'object' && Object.hasOwn(e, 'payload')) payload = e.payload;
  else if (e instanceof Error) throw new TrapError(`the policy threw in derive (in the host: a trap): ${describeThrown(e)}`);
  if (typeof payload !== 'object' || payload === null || !ERROR_CODES.includes(payload.code)) {
    throw bad('derive', `an error that is not a policy-error record (${String(payload?.code ?? payload)})`);
  }
  return {
    code: payload.code,
    field: opt(payload.field, (f) => str('derive', 'error.field', f)),
    message: str('derive', 'error.message', payload.message),
  };
}

/** @param {import('./operation.js').HostOperation} op */
export function toGuestContext(op, dup) {
  return {
    operation: toGuestOperation(op),
    state: dup.state,
    fingerprintMatches: dup.fingerprintMatches,
    attempts: Number(dup.attempts),
    ageMs: dup.ageMs,
    leaseRemainingMs: dup.leaseRemainingMs,
    outcome: dup.outcome && { status: Number(dup.outcome.status), size: dup.outcome.size, error: dup.outcome.error },
  };
}

export function liftDecision(v) {
  const call = 'onDuplicate';
  if (typeof v !== 'object' || v === null || !DECISIONS.includes(v.tag)) {
    throw bad(call, `${JSON.stringify(v?.tag ?? String(v))}, not a decision`);
  }
  const rejection = (r) => {
    if (typeof r !== 'object' || r === null) throw bad(call, `${String(r)} as a rejection`);
    return {
      status: Number(uint(call, 'status', r.status, 0xffffn)),
      reason: str(call, 'reason', r.reason),
      retryAfterMs: opt(r.retryAfterMs, (x) => uint(call, 'retryAfterMs', x, U64_MAX)),
    };
  };
  if (v.tag === 'reject' || v.tag === 'mark-unknown') return { tag: v.tag, val: rejection(v.val) };
  if (v.tag === 'wait') return { tag: 'wait', val: uint(call, 'wait', v.val, U64_MAX) };
  return { tag: v.tag };
}

/** Rust's `{:?}` of a decision, for the messages that show one. */
export function debugDecision(d) {
  const r = (x) =>
    `Rejection { status: ${x.status}, reason: ${JSON.stringify(x.reason)}, retry_after_ms: ${x.retryAfterMs === undefined ? 'None' : `Some(${x.retryAfterMs})`} }`;
  switch (d.tag) {
    case 'replay': return 'Replay';
    case 're-execute': return 'ReExecute';
    case 'wait': return `Wait { max_ms: ${d.val} }`;
    case 'reject': return `Reject(${r(d.val)})`;
    default: return `MarkUnknown(${r(d.val)})`;
  }
}
