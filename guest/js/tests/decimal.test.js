// The SDK's decimal normalisation against every example in the Rust SDK
// (guest/sdk/src/decimal.rs, helpers.rs doctests and unit tests) and the
// guide (docs/guide/writing-a-policy.md), and its agreement with the host's
// spelling of JSON numbers.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { canonicalDecimal, DecimalError, MAX_DECIMAL_LEN, Operation, ErrorCode } from '../sdk/index.js';
import { canonicalNumber } from '../sdk/testing/index.js';

test('canonical spellings (decimal.rs doctest, the guide)', () => {
  for (const [text, want] of [
    ['10.50', '10.5'],
    ['10.5', '10.5'],
    ['0010.00', '10'],
    ['-0.0', '0'],
    ['0.050', '0.05'],
  ]) {
    assert.equal(canonicalDecimal(text), want, text);
  }
});

test('garbage is refused (decimal.rs doctest)', () => {
  for (const garbage of ['', 'ten', '1,000.00', '1e3', '+5', ' 5', '5.', '.5', '--5', 'NaN']) {
    assert.throws(() => canonicalDecimal(garbage), DecimalError, garbage);
  }
});

test('messages are Rust\'s, word for word', () => {
  const why = (t) => {
    try {
      canonicalDecimal(t);
    } catch (e) {
      return e.message;
    }
    return assert.fail(`${t} was accepted`);
  };
  assert.equal(why('12,50'), '`12,50` is not a decimal: only digits, one `.` and a leading `-` are allowed');
  assert.equal(why(''), '`` is not a decimal: it is empty');
  assert.equal(why('5.'), '`5.` is not a decimal: it needs a digit after the `.`');
  assert.equal(why('.5'), '`.5` is not a decimal: it needs a digit before the `.`');
  assert.equal(why('-'), '`-` is not a decimal: it needs a digit before the `.`');
  assert.equal(why('1.2.3'), '`1.2.3` is not a decimal: only digits, one `.` and a leading `-` are allowed');
});

test('errors quote a bounded text (decimal.rs errors_quote_a_bounded_text)', () => {
  const long = `${'9'.repeat(100)}x`;
  try {
    canonicalDecimal(long);
    assert.fail('accepted');
  } catch (e) {
    assert.ok([...e.text].length <= 41, e.message);
    assert.ok(e.text.endsWith('…'));
  }
  const huge = '9'.repeat(MAX_DECIMAL_LEN + 1);
  assert.throws(() => canonicalDecimal(huge), (e) => e.why === 'it is longer than 128 characters');
  // 128 is counted in UTF-8 bytes: 50 `é` are 100 bytes, quoted to 20 `é` (40 bytes) and `…`.
  const accents = 'é'.repeat(50);
  assert.throws(() => canonicalDecimal(accents), (e) => e.text === `${'é'.repeat(20)}…`);
  assert.throws(() => canonicalDecimal('1'.repeat(65) + 'é'.repeat(32)), (e) => e.why === 'it is longer than 128 characters');
  assert.equal(canonicalDecimal('9'.repeat(128)), '9'.repeat(128));
});

test('agrees with the host spelling of JSON numbers (decimal.rs)', () => {
  for (const int of ['0', '1', '10', '100', '12345678901234567890']) {
    for (const frac of ['', '.0', '.5', '.50', '.05', '.000', '.125']) {
      for (const sign of ['', '-']) {
        const text = `${sign}${int}${frac}`;
        assert.equal(canonicalDecimal(text), canonicalNumber(text), text);
      }
    }
  }
});

test('op.decimal: the helpers.rs doctest', () => {
  const op = new Operation({
    kind: 'charge',
    tenant: 'acme',
    fields: [
      { name: 'amount', value: { tag: 'text', val: '10.50' } },
      { name: 'fee', value: { tag: 'number', val: '0.3' } },
      { name: 'flag', value: { tag: 'boolean', val: true } },
      { name: 'note', value: { tag: 'text', val: 'ten' } },
    ],
    run: undefined,
    nowMs: 0n,
  });
  assert.equal(op.decimal('amount'), '10.5');
  assert.equal(op.decimal('fee'), '0.3');
  assert.throws(() => op.decimal('note'), {
    code: ErrorCode.InvalidValue,
    field: 'note',
    message: '`note` must be a decimal like 10.50: `ten` is not a decimal: only digits, one `.` and a leading `-` are allowed',
  });
  assert.throws(() => op.decimal('flag'), { message: '`flag` must be a decimal like 10.50, not a boolean' });
  assert.throws(() => op.decimal('tax'), { code: ErrorCode.MissingField, field: 'tax' });
});

// The vectors every SDK reads (guest/testdata/decimals.json, the Rust SDK's
// behaviour written down): a divergence between languages fails here, in
// guest/python/tests/test_decimal.py or in guest/sdk/src/decimal.rs.
const vectors = JSON.parse(readFileSync(new URL('../../testdata/decimals.json', import.meta.url), 'utf8'));

test('the shared decimal vectors: canonicalDecimal and op.decimal on text', () => {
  assert.ok(vectors.decimals.length > 0);
  for (const v of vectors.decimals) {
    const op = new Operation({ kind: 'k', tenant: 't', fields: [{ name: 'amount', value: { tag: 'text', val: v.text } }], run: undefined, nowMs: 0n });
    if (v.canonical !== undefined) {
      assert.equal(canonicalDecimal(v.text), v.canonical, JSON.stringify(v.text));
      assert.equal(op.decimal('amount'), v.canonical, JSON.stringify(v.text));
    } else {
      assert.throws(() => canonicalDecimal(v.text), (e) => e instanceof DecimalError && e.why === v.refused
        && (v.message === undefined || e.message === v.message), JSON.stringify(v.text));
      assert.throws(() => op.decimal('amount'), { code: ErrorCode.InvalidValue, field: 'amount' }, JSON.stringify(v.text));
    }
  }
});

test('the shared decimal vectors: JSON numbers, exponents included, through the host spelling', () => {
  assert.ok(vectors.numbers.length > 0);
  for (const v of vectors.numbers) {
    const val = canonicalNumber(v.json);
    assert.equal(val, v.canonical, v.json);
    const op = new Operation({ kind: 'k', tenant: 't', fields: [{ name: 'amount', value: { tag: 'number', val } }], run: undefined, nowMs: 0n });
    assert.equal(op.decimal('amount'), v.canonical, v.json);
  }
});
