// The runner's canonical JSON numbers against every example in
// host/idem-core/src/number.rs and docs/reference/operation.md, plus the
// properties number.rs checks with proptest (here over fixed, seeded inputs).

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { canonicalNumber, NumberError } from '../sdk/testing/index.js';

test('spellings of one number agree (number.rs, operation.md)', () => {
  for (const text of ['100', '100.0', '1e2', '1.00E+2', '10000e-2', '0.1e3']) assert.equal(canonicalNumber(text), '100', text);
});

test('canonical forms (number.rs, operation.md)', () => {
  for (const [text, want] of [
    ['0', '0'],
    ['-0', '0'],
    ['-0.000', '0'],
    ['0e999999999999999999999', '0'],
    ['1.5', '1.5'],
    ['-1.50', '-1.5'],
    ['0.05', '0.05'],
    ['5e-3', '0.005'],
    ['123.456e1', '1234.56'],
    ['12345678901234567890.125', '12345678901234567890.125'],
    ['1.50e2', '150'],
    ['150.0', '150'],
    ['15e-1', '1.5'],
    ['1E+0', '1'],
    ['-12e-5', '-0.00012'],
  ]) {
    assert.equal(canonicalNumber(text), want, text);
  }
});

test('refuses non-numbers and huge spellings (number.rs)', () => {
  for (const bad of ['', '-', '01', '1.', '.5', '1e', '+1', '1e+', '0x10', '1_000', 'NaN']) {
    assert.throws(() => canonicalNumber(bad), (e) => e instanceof NumberError && e.kind === 'syntax', bad);
  }
  for (const huge of ['1e400', '1e-400', '1e99999999999999999999']) {
    assert.throws(() => canonicalNumber(huge), (e) => e.kind === 'out-of-range', huge);
  }
});

test('the 128-character bound counts the sign', () => {
  assert.equal(canonicalNumber(`1e127`), `1${'0'.repeat(127)}`);
  assert.throws(() => canonicalNumber('1e128'), { kind: 'out-of-range' });
  assert.throws(() => canonicalNumber('-1e127'), { kind: 'out-of-range' });
  assert.equal(canonicalNumber('1e-126'), `0.${'0'.repeat(125)}1`);
  assert.throws(() => canonicalNumber('1e-127'), { kind: 'out-of-range' });
  assert.throws(() => canonicalNumber('1e400'), { message: '`1e400` spells to more than 128 digits; send it as a string' });
});

// A small deterministic generator: the same inputs every run.
function* seeded(n, seed = 0x1d3e) {
  let x = seed;
  for (let i = 0; i < n; i++) {
    x = (x * 1103515245 + 12345) % 2 ** 31;
    yield x;
  }
}

test('integers match their decimal spelling (i64, as number.rs)', () => {
  const samples = [0n, 1n, -1n, (1n << 63n) - 1n, -(1n << 63n)];
  for (const r of seeded(300)) samples.push(BigInt(r) * BigInt(r) * BigInt(r) * (r % 2 ? 1n : -1n));
  for (const n of samples) assert.equal(canonicalNumber(n.toString()), n.toString());
});

test('exponent shifts do not change the number; the canonical form is a fixed point', () => {
  const rs = [...seeded(400)];
  for (let i = 0; i < rs.length; i += 2) {
    const m = BigInt((rs[i] % 999_999) + 1);
    const shift = rs[i + 1] % 20;
    assert.equal(canonicalNumber(`${m * 10n ** BigInt(shift)}e${-shift}`), canonicalNumber(m.toString()));
    const frac = String(rs[i + 1]).slice(0, rs[i] % 9);
    const exp = (rs[i + 1] % 60) - 30;
    const text = frac ? `${m}.${frac}e${exp}` : `${m}e${exp}`;
    const once = canonicalNumber(text);
    assert.equal(canonicalNumber(once), once, text);
  }
});
