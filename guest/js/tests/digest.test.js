// The key encoding against host/idem-core/src/digest.rs, golden vector included.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { digest, encode } from '../sdk/testing/index.js';

const part = (name, value) => ({ name, value });

test('the golden vector (digest.rs): changing it changes every key ever issued', () => {
  assert.equal(
    digest('key', 'billing', [part('customer', 'c1'), part('invoice_id', 'i1')]),
    'e769850ffcf82c59c0e32bab9ea257cbd9e491e2c2ef1ab972dbe45f4fab2961',
  );
});

test('length prefixes keep boundaries; domains and namespaces separate', () => {
  assert.notEqual(digest('key', 'ns', [part('a', 'bc')]), digest('key', 'ns', [part('ab', 'c')]));
  assert.notEqual(
    digest('key', 'ns', [part('a', 'b'), part('c', 'd')]),
    digest('key', 'ns', [part('a', 'b\0\0\0\u0001c'), part('', 'd')]),
  );
  assert.notEqual(digest('key', 'ns', [part('x', '1')]), digest('fingerprint', 'ns', [part('x', '1')]));
  assert.notEqual(digest('key', 'ns', [part('x', '1')]), digest('key', 'ns2', [part('x', '1')]));
});

test('lengths are UTF-8 bytes', () => {
  const bytes = encode('key', 'n', [part('é', '😀')]);
  assert.equal(bytes.toString('hex'), '00000001' + '00000003' + '6b6579' + '00000001' + '6e' + '00000001' + '00000002' + 'c3a9' + '00000004' + 'f09f9880');
});
