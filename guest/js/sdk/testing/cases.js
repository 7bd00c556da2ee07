// Cases files, run natively: a port of host/idem-core/src/cases.rs (the
// runner behind both the Rust SDK's `assert_cases` and `idem test`), with its
// verdicts and messages, so a cases file that passes here passes there.

import { parseJson, collapseLikeSerdeValue, JsonObject } from './json.js';
import { struct, string, boolean, integer, optional, oneOf, ShapeError } from './serde.js';
import { canonicalOperation } from './operation.js';
import { validatePolicyInfo, finish, MalformedError } from './derivation.js';
import { checkDecision } from './duplicate.js';
import { describeThrown } from './frames.js';
import { toGuestOperation, toGuestContext, liftPolicyInfo, liftDerivation, liftThrown, liftDecision, debugDecision, TrapError, DECISIONS } from './boundary.js';

const STATES = ['in-progress', 'completed', 'failed-retryable', 'failed-permanent', 'outcome-unknown'];
const ERROR_CODES = ['missing-field', 'invalid-value', 'unsupported-kind'];

const keep = (v) => v; // a case's `op`: read later, as the host reads it
const none = () => undefined;
const u64 = optional(integer('u64'));
const outcome = (v) => struct(v, { status: [integer('i32')], size: [integer('u64'), () => 0n], error: [optional(string), none] });

const EXPECT = {
  key: [optional(string), none],
  fingerprint: [optional(string), none],
  partition: [optional(string), none],
  retention_s: [u64, none],
  lease_s: [optional(integer('u32')), none],
  same_key_as: [optional(string), none],
  key_differs_from: [optional(string), none],
  same_fingerprint_as: [optional(string), none],
  fingerprint_differs_from: [optional(string), none],
  error: [optional(string), none],
  field: [optional(string), none],
  malformed: [optional(boolean), none],
  decision: [optional(string), none],
  status: [optional(integer('u16')), none],
  retry_after_ms: [u64, none],
  wait_ms: [u64, none],
  unsafe: [optional(boolean), none],
};

/**
 * Reads a cases file; throws a ShapeError or a JsonSyntaxError when it is
 * not one.
 * @param {string} text
 */
export function parseCasesFile(text) {
  return struct(parseJson(text), {
    policy: [optional(string), none],
    cases: [
      (v) => {
        if (!Array.isArray(v)) throw new ShapeError('invalid type, expected a sequence of cases');
        return v.map((c) =>
          struct(c, {
            name: [string],
            op: [keep],
            duplicate: [
              optional((d) =>
                struct(d, {
                  state: [oneOf(STATES)],
                  fingerprint_matches: [boolean, () => true],
                  attempts: [integer('u32'), () => 1n],
                  age_ms: [integer('u64'), () => 0n],
                  lease_remaining_ms: [integer('u64'), () => 0n],
                  outcome: [optional(outcome), none],
                }),
              ),
              none,
            ],
            expect: [(e) => struct(e, EXPECT)],
          }),
        );
      },
    ],
  });
}

const checksSomething = (e) =>
  ['key', 'fingerprint', 'partition', 'retention_s', 'lease_s', 'same_key_as', 'key_differs_from', 'same_fingerprint_as',
    'fingerprint_differs_from', 'error', 'malformed', 'decision', 'unsafe'].some((k) => e[k] !== undefined);

/** Rust's `Display` of a policy error. */
const showError = (err) => `${err.code} (400)${err.field !== undefined ? ` in field \`${err.field}\`` : ''}: ${err.message}`;

/** Calls the policy; an exception is a trap, which fails the case alone. */
function call(what, fn) {
  try {
    return fn();
  } catch (e) {
    if (e instanceof TrapError) throw e;
    // The exception's type and the policy's own file and line, as the host
    // names them: the report's header names the cases file, which is not
    // where the fault is.
    throw new TrapError(`the policy threw in ${what} (in the host: a trap): ${describeThrown(e)}`);
  }
}

/**
 * Runs every case of a parsed cases file against a policy export (the
 * module's `policy`, as `definePolicy` returns it).
 * @param {import('../export.js').PolicyExport} policy
 * @param {ReturnType<typeof parseCasesFile>} file
 * @returns {{ results: Array<{ name: string, passed: boolean, detail: string }> }}
 */
export function runCases(policy, file) {
  const results = [];
  let info;
  try {
    info = liftPolicyInfo(call('describe', () => policy.describe()));
    validatePolicyInfo(info);
  } catch (e) {
    results.push({ name: 'describe', passed: false, detail: e.message });
    return { results };
  }
  if (file.policy !== undefined && file.policy !== info.name) {
    results.push({ name: 'describe', passed: false, detail: `the cases are for policy \`${file.policy}\`, this is \`${info.name}\`` });
    return { results };
  }
  // Every key a case derived, passing or not: a case that got its own
  // expectations wrong still has a key, and the cases comparing with it are
  // judged on their own (one mistake, one failing case).
  const seen = new Map();
  const failed = new Set();
  for (const c of file.cases) {
    const [outcome, keyed] = runCase(policy, info, c, seen, failed);
    if (keyed) seen.set(c.name, keyed);
    if (!outcome.ok) failed.add(c.name);
    results.push({ name: c.name, passed: outcome.ok, detail: outcome.detail });
  }
  return { results };
}

const pass = (detail) => ({ ok: true, detail });
const fail = (detail) => ({ ok: false, detail });

function runCase(policy, info, c, seen, failed) {
  const e = c.expect;
  if (!checksSomething(e)) return [fail('`expect` checks nothing; say what must hold')];
  let op;
  try {
    // The host reads `op` through serde_json's Value and respells it.
    const value = c.op instanceof JsonObject ? collapseLikeSerdeValue(c.op) : c.op;
    op = canonicalOperation(value);
  } catch (err) {
    return [fail(`the case's op is invalid: ${err.message}`)];
  }
  op.nowMs ??= 0n;
  try {
    return c.duplicate === undefined ? deriveCase(policy, info, op, e, seen, failed) : [duplicateCase(policy, op, c.duplicate, e)];
  } catch (err) {
    if (err instanceof TrapError) return [fail(err.message)];
    throw err;
  }
}

function deriveCase(policy, info, op, e, seen, failed) {
  let raw;
  let refusal;
  call('derive', () => {
    try {
      raw = policy.derive(toGuestOperation(op));
    } catch (thrown) {
      refusal = liftThrown(thrown); // a policy-error record, or a TrapError
    }
  });
  // Lowered on return, as in the host: a value the contract cannot carry
  // traps whatever the case expects.
  const derived = refusal === undefined ? liftDerivation(raw) : undefined;
  if (e.error !== undefined) {
    if (!ERROR_CODES.includes(e.error)) {
      return [fail(`unknown error code \`${e.error}\`: expected missing-field, invalid-value or unsupported-kind`)];
    }
    if (refusal === undefined) return [fail(`expected policy error ${e.error}, got a key`)];
    if (refusal.code !== e.error) return [fail(`expected policy error ${e.error}, got ${showError(refusal)}`)];
    if (e.field !== undefined && refusal.field !== e.field) {
      return [fail(`expected the error to name field Some(${JSON.stringify(e.field)}), got ${showError(refusal)}`)];
    }
    return [pass(`refused: ${showError(refusal)}`)];
  }
  if (refusal !== undefined) return [fail(`expected a key, got policy error ${showError(refusal)}`)];
  let keyed;
  try {
    keyed = finish(derived, info.namespace);
  } catch (err) {
    if (!(err instanceof MalformedError)) throw err;
    return [e.malformed === true ? pass(err.message) : fail(err.message)];
  }
  if (e.malformed === true) return [fail('expected the host to refuse the derivation, it was accepted'), keyed];
  const problems = [];
  if (e.key !== undefined && e.key !== keyed.keyHex) problems.push(`key: expected ${e.key}, got ${keyed.keyHex}`);
  if (e.fingerprint !== undefined && e.fingerprint !== keyed.fingerprintHex) {
    problems.push(`fingerprint: expected ${e.fingerprint}, got ${keyed.fingerprintHex}`);
  }
  if (e.partition !== undefined && e.partition !== keyed.partition) {
    problems.push(`partition: expected ${JSON.stringify(e.partition)}, got ${JSON.stringify(keyed.partition)}`);
  }
  if (e.retention_s !== undefined && e.retention_s !== keyed.retentionS) {
    problems.push(`retention_s: expected ${e.retention_s}, got ${keyed.retentionS}`);
  }
  if (e.lease_s !== undefined && e.lease_s !== BigInt(keyed.leaseS)) problems.push(`lease_s: expected ${e.lease_s}, got ${keyed.leaseS}`);
  for (const [other, isKey, wantEqual] of [
    [e.same_key_as, true, true],
    [e.key_differs_from, true, false],
    [e.same_fingerprint_as, false, true],
    [e.fingerprint_differs_from, false, false],
  ]) {
    if (other === undefined) continue;
    const theirs = seen.get(other);
    if (!theirs) {
      problems.push(failed.has(other)
        ? `case ${JSON.stringify(other)} failed without deriving a key to compare with`
        : `no earlier case named ${JSON.stringify(other)} with a key`);
      continue;
    }
    const [mine, their, what] = isKey ? [keyed.keyHex, theirs.keyHex, 'key'] : [keyed.fingerprintHex, theirs.fingerprintHex, 'fingerprint'];
    if ((mine === their) !== wantEqual) {
      problems.push(`${what} should ${wantEqual ? 'equal' : 'differ from'} that of ${JSON.stringify(other)} (${mine} vs ${their})`);
    }
  }
  return problems.length === 0 ? [pass(`key ${keyed.keyHex.slice(0, 16)}…`), keyed] : [fail(problems.join('; ')), keyed];
}

function duplicateCase(policy, op, dup, e) {
  const ctx = {
    state: dup.state,
    fingerprintMatches: dup.fingerprint_matches,
    attempts: dup.attempts,
    ageMs: dup.age_ms,
    // Only an in-progress record has a lease; any other state is handed 0.
    leaseRemainingMs: dup.state === 'in-progress' ? dup.lease_remaining_ms : 0n,
    outcome: dup.outcome,
  };
  if (e.decision !== undefined && !DECISIONS.includes(e.decision)) {
    return fail(`unknown decision \`${e.decision}\` in \`expect\`: expected ${DECISIONS.join(', ')}`);
  }
  const decision = liftDecision(call('on-duplicate', () => policy.onDuplicate(toGuestContext(op, ctx))));
  const refused = checkDecision(ctx, decision);
  const problems = [];
  if (e.unsafe === true && refused === undefined) problems.push(`expected the host to refuse \`${decision.tag}\`, it was allowed`);
  if (e.unsafe !== true && refused !== undefined) problems.push(`the host refused the decision: ${refused}`);
  if (e.decision !== undefined && e.decision !== decision.tag) problems.push(`decision: expected ${e.decision}, got ${decision.tag}`);
  const rejection = decision.tag === 'reject' || decision.tag === 'mark-unknown' ? decision.val : undefined;
  if (e.status !== undefined) {
    if (rejection === undefined) problems.push(`status: expected ${e.status}, but \`${decision.tag}\` has none`);
    else if (BigInt(rejection.status) !== e.status) problems.push(`status: expected ${e.status}, got ${rejection.status}`);
  }
  if (e.retry_after_ms !== undefined && rejection?.retryAfterMs !== e.retry_after_ms) {
    const got = rejection?.retryAfterMs;
    problems.push(`retry_after_ms: expected ${e.retry_after_ms}, got ${got === undefined ? 'None' : `Some(${got})`}`);
  }
  if (e.wait_ms !== undefined && !(decision.tag === 'wait' && decision.val === e.wait_ms)) {
    problems.push(`wait_ms: expected wait ${e.wait_ms}, got ${debugDecision(decision)}`);
  }
  if (problems.length > 0) return fail(problems.join('; '));
  return pass(refused === undefined ? decision.tag : `refused as expected: ${refused}`);
}

/** The closing line: `N passed, N failed`. */
export function summary(report) {
  const passed = report.results.filter((r) => r.passed).length;
  return `${passed} passed, ${report.results.length - passed} failed`;
}
