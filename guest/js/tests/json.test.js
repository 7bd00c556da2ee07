// The number-preserving JSON parser, and the host's canonical operation
// built on it (the examples of host/idem-core/src/operation.rs).

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { parseJson, JsonNumber, JsonObject, JsonSyntaxError, toCompactJson, canonicalOperation, OpError } from '../sdk/testing/index.js';

test('numbers keep their source spelling', () => {
  const v = parseJson('[100.0, 1.50e2, -0, 12345678901234567890.125, 1E+2, 1e999]');
  assert.deepEqual(v.map((n) => n.text), ['100.0', '1.50e2', '-0', '12345678901234567890.125', '1E+2', '1e999']);
  assert.ok(v.every((n) => n instanceof JsonNumber));
});

test('objects keep order and repeated names', () => {
  const v = parseJson('{"b":1,"a":true,"b":"x"}');
  assert.ok(v instanceof JsonObject);
  assert.deepEqual(v.entries.map(([k]) => k), ['b', 'a', 'b']);
});

test('strings: escapes, surrogate pairs, and what serde_json refuses', () => {
  assert.equal(parseJson('"e\\u0301 \\ud83d\\ude00 \\n\\/"'), 'e\u0301 😀 \n/');
  for (const bad of ['"\\ud83d"', '"\\ude00"', '"a\u0001"', '"\\x"', '"abc', '\ufeff{}', '01', '1.', '.5', '+1', '[1,]', '{"a":1,}', '{} x', 'nul', "'a'", 'NaN']) {
    assert.throws(() => parseJson(bad), JsonSyntaxError, JSON.stringify(bad));
  }
  assert.throws(() => parseJson('{"a":\n  tru}'), /at line 2 column 3/);
});

test('nesting is bounded at 128, as serde_json', () => {
  assert.doesNotThrow(() => parseJson('['.repeat(128) + ']'.repeat(128)));
  assert.throws(() => parseJson('['.repeat(129) + ']'.repeat(129)), /recursion limit exceeded/);
});

test('the compact spelling is serde_json\'s', () => {
  assert.equal(toCompactJson(parseJson(' { "a" : [ 1.50 , "é\\"\\u0007/" , null ] } ')), '{"a":[1.50,"é\\"\\u0007/",null]}');
});

const op = (text) => canonicalOperation(parseJson(text));

test('one logical operation is one canonical value (operation.rs)', () => {
  const a = op('{"kind":"charge","tenant":"acme","fields":{"b":1.50,"a":"e\\u0301"}}');
  const b = op('{ "fields": {"a":"é", "b":15e-1}, "tenant":"acme", "kind":"charge" }');
  assert.deepEqual(a, b);
  assert.deepEqual(a.fields, [['a', { tag: 'text', val: 'é' }], ['b', { tag: 'number', val: '1.5' }]]);
});

test('the documented seed example reads (operation.rs)', () => {
  const o = op('{"kind":"charge","tenant":"acme","fields":{"customer":"c1","billing_period":"2026-11","invoice_id":"i1","amount":"100","currency":"EUR"},"run":{"run_id":"nightly-2026-11-30","trigger":"scheduled","attempt":1}}');
  assert.equal(o.fields.length, 5);
  assert.equal(o.fields[0][0], 'amount');
  assert.deepEqual(o.run, { runId: 'nightly-2026-11-30', trigger: 'scheduled', attempt: 1 });
  assert.equal(o.nowMs, undefined);
  assert.equal(op('{"kind":"k","tenant":"t","now_ms":5}').nowMs, 5n);
});

test('fields sort by UTF-8 bytes, not UTF-16 units', () => {
  // U+FF61 sorts after U+1F600 in UTF-16 (0xFF61 > 0xD83D) but before it in UTF-8 (EF < F0).
  const o = op('{"kind":"k","tenant":"t","fields":{"😀":1,"｡":2,"a":3}}');
  assert.deepEqual(o.fields.map(([n]) => n), ['a', '｡', '😀']);
});

test('refuses unknown members, repeated and colliding names, bad values (operation.rs)', () => {
  for (const [doc, needle] of [
    ['{"kind":"k","tenant":"t","color":"red"}', 'unknown field `color`'],
    ['{"kind":"k","tenant":"t","run":{"run_id":"r","trigger":"manual","x":1}}', 'unknown field `x`'],
    ['{"kind":"k","tenant":"t","fields":{"a":1,"a":2}}', 'field `a` appears twice'],
    ['{"kind":"k","tenant":"t","fields":{"é":1,"e\\u0301":2}}', 'NFC'],
    ['{"kind":"k","kind":"j","tenant":"t"}', 'duplicate field `kind`'],
    ['{"kind":"k","tenant":"t","fields":{"a":null}}', 'field `a` is null'],
    ['{"kind":"k","tenant":"t","fields":{"a":[1]}}', 'field `a` is an array'],
    ['{"kind":"k","tenant":"t","fields":{"a":{}}}', 'field `a` is an object'],
    ['{"kind":"k","tenant":"t","fields":{"a":1e999}}', 'send it as a string'],
    ['{"kind":"","tenant":"t"}', '`kind`: must not be empty'],
    ['{"kind":"k","tenant":"t","run":{"run_id":"r","trigger":"cron"}}', 'unknown variant `cron`'],
    ['{"kind":"k","tenant":"t","run":{"run_id":"r","trigger":"retry","attempt":0}}', 'starts at 1'],
    ['{"kind":"k"}', 'missing field `tenant`'],
    ['[]', 'must be a JSON object'],
    ['{"kind":"k\\u0007","tenant":"t"}', 'control characters'],
    ['{"kind":"k","tenant":"t","now_ms":1.5}', 'expected u64'],
  ]) {
    assert.throws(() => op(doc), (e) => e instanceof OpError && e.message.includes(needle), `${doc} → ${needle}`);
  }
});

test('refuses an operation over 64 KiB, measured on its compact spelling', () => {
  const big = `{"kind":"k","tenant":"t","fields":{"a":"${'x'.repeat(64 * 1024)}"}}`;
  assert.throws(() => op(big), /bytes; the limit is 65536 bytes/);
});
