// The SDK's helpers against the Rust SDK's semantics (guest/sdk/src/helpers.rs):
// field access, errors, the derivation builder, the decisions, the glue.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Operation, PolicyError, ErrorCode, Derivation, Decision, RecordState, definePolicy, material, DAY, HOUR, MINUTE } from '../sdk/index.js';
import { checkDecision } from '../sdk/testing/index.js';

const f = (name, tag, val) => ({ name, value: { tag, val } });
const op = new Operation({
  kind: 'charge',
  tenant: 'acme',
  fields: [f('amount', 'number', '1.5'), f('empty', 'text', ''), f('name', 'text', 'x'), f('vip', 'boolean', false)],
  run: undefined,
  nowMs: 7n,
});

test('field access: text, optionalText, material, number, boolean', () => {
  assert.equal(op.text('name'), 'x');
  assert.throws(() => op.text('empty'), { code: 'invalid-value', field: 'empty', message: '`empty` must not be empty' });
  assert.throws(() => op.text('amount'), { message: '`amount` must be a string' });
  assert.throws(() => op.text('nope'), { code: 'missing-field', field: 'nope', message: 'the operation has no `nope`' });
  assert.equal(op.optionalText('nope'), undefined);
  assert.equal(op.optionalText('empty'), '');
  assert.throws(() => op.optionalText('vip'), { message: '`vip` must be a string' });
  assert.equal(op.material('amount'), '1.5');
  assert.equal(op.material('vip'), 'false');
  assert.equal(material({ tag: 'boolean', val: true }), 'true');
  assert.equal(op.number('amount'), '1.5');
  assert.throws(() => op.number('name'), { message: '`name` must be a number' });
  assert.equal(op.boolean('vip'), false);
  assert.throws(() => op.boolean('name'), { message: '`name` must be a boolean' });
  assert.equal(op.nowMs, 7n);
});

test('error constructors: Rust\'s codes and messages', () => {
  assert.deepEqual(PolicyError.unsupportedKind('refund').toRecord(), {
    code: ErrorCode.UnsupportedKind,
    field: undefined,
    message: 'this policy does not handle operations of kind `refund`',
  });
  assert.equal(PolicyError.invalid('f', 'is bad').message, '`f` is bad');
  assert.ok(PolicyError.is(PolicyError.missing('f')));
  assert.ok(!PolicyError.is(new Error('x')));
});

test('the builder: Rust\'s defaults, parts in order, u64 as BigInt', () => {
  assert.deepEqual([MINUTE, HOUR, DAY], [60, 3600, 86400]);
  assert.deepEqual(new Derivation('p').key('a', '1').toRecord(), {
    key: [{ name: 'a', value: '1' }], fingerprint: [], partition: 'p', retentionS: 86400n, leaseS: 300,
  });
  const d = new Derivation('p').key('b', '2').key('a', '1').fingerprint('x', 'y').retentionS(400 * DAY).leaseS(MINUTE).toRecord();
  assert.deepEqual(d.key.map((p) => p.name), ['b', 'a']);
  assert.equal(d.retentionS, 34560000n);
  assert.equal(new Derivation('p').retentionS(2n ** 60n).toRecord().retentionS, 2n ** 60n);
  assert.throws(() => new Derivation('p').retentionS(1.5), TypeError);
  assert.throws(() => new Derivation('p').retentionS(-1), TypeError);
  assert.throws(() => new Derivation('p').leaseS(2 ** 32), TypeError);
  assert.throws(() => new Derivation('p').key('n', 5), TypeError);
});

const ctx = (state, fingerprintMatches, leaseRemainingMs) => ({
  operation: op, state, fingerprintMatches, attempts: 1, ageMs: 0n, leaseRemainingMs, outcome: undefined,
});

test('Decision.standard: the Rust table, and the host lets every answer through', () => {
  const expect = {
    'completed': 'replay', 'failed-permanent': 'replay', 'failed-retryable': 're-execute', 'outcome-unknown': 'reject',
  };
  for (const state of Object.values(RecordState)) {
    for (const fp of [true, false]) {
      for (const lease of state === RecordState.InProgress ? [0n, 5000n] : [0n]) {
        const c = ctx(state, fp, lease);
        const d = Decision.standard(c);
        const want = !fp ? 'reject' : state === 'in-progress' ? (lease > 0n ? 'reject' : 'mark-unknown') : expect[state];
        assert.equal(d.tag, want, `${state} ${fp} ${lease}`);
        assert.equal(checkDecision(c, d), undefined, `${state} ${fp} ${lease}`);
        if (!fp) assert.equal(d.val.status, 422);
        if (state === 'in-progress' && fp) assert.equal(d.val.status, 409);
        if (state === 'in-progress' && fp && lease > 0n) assert.equal(d.val.retryAfterMs, 5000n);
      }
    }
  }
});

test('the glue: a PolicyError leaves as a plain record, any other throw as is', () => {
  const policy = definePolicy({
    describe: () => ({ name: 'n', version: '1.0.0', namespace: 'n', description: 'd', extra: 1 }),
    derive: (o) => (o.kind === 'bug' ? null.x : new Derivation(o.text('c')).key('c', o.text('c'))),
    onDuplicate: (c) => Decision.wait(c.operation.text('c') === 'x' ? 10 : 20),
  });
  const raw = (kind, fields) => ({ kind, tenant: 't', fields, run: undefined, nowMs: 0n });
  assert.deepEqual(Object.keys(policy.describe()), ['name', 'version', 'namespace', 'description']);
  assert.equal(policy.derive(raw('k', [f('c', 'text', 'x')])).partition, 'x');
  assert.throws(() => policy.derive(raw('k', [])), (e) => !(e instanceof Error) && e.code === 'missing-field' && e.field === 'c');
  assert.throws(() => policy.derive(raw('bug', [])), TypeError);
  const dup = { ...ctx('in-progress', true, 5n), operation: raw('k', [f('c', 'text', 'x')]) };
  assert.deepEqual(policy.onDuplicate(dup), { tag: 'wait', val: 10n });
  assert.throws(() => definePolicy({ describe() {} }), /needs a `derive` function/);
});
