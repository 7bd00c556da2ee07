// What a failing policy tells the host (failure.js): the exception's type and
// message, then the author's file and line, mapped through the bundle's line
// table the build appends (guest/build/src/source_map.rs).

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { describeFailure, sourceFrames } from '../sdk/failure.js';

// Bundle lines 1-2 unmapped, 3 → @idem/policy/operation.js:40, 4 → policy.js:9, 5 → policy.js:20.
const table = {
  bundle: 'policy.bundle.js',
  files: ['@idem/policy/operation.js', 'policy.js'],
  lines: [-1, 0, -1, 0, 0, 40, 1, 9, 1, 20],
};

/** An Error whose stack is SpiderMonkey's, as inside the component. */
function thrown(Type, message, stack) {
  const e = new Type(message);
  Object.defineProperty(e, 'stack', { value: stack });
  return e;
}

test("a thrown error names its type, message and the author's line", () => {
  const e = thrown(TypeError, 'op.txt is not a function', 'derive@policy.bundle.js:4:17\nderive@policy.bundle.js:99:3\n');
  assert.equal(describeFailure(e, table), 'TypeError: op.txt is not a function at derive (policy.js:9)');
});

test("a frame in the SDK is named, up to the author's own", () => {
  const stack = 'decimal@/x/policy.bundle.js:3:5\nderive@/x/policy.bundle.js:5:11\ncaller@/x/policy.bundle.js:4:1';
  assert.deepEqual(sourceFrames(stack, table), ['decimal (@idem/policy/operation.js:40)', 'derive (policy.js:20)']);
});

test("QuickJS's frames are read as SpiderMonkey's", () => {
  const stack = '    at decimal (/x/policy.bundle.js:3:5)\n    at <anonymous> (prelude.js:2:1)\n    at /x/policy.bundle.js:5:11\n    at caller (/x/policy.bundle.js:4:1)\n';
  assert.deepEqual(sourceFrames(stack, table), ['decimal (@idem/policy/operation.js:40)', '<module> (policy.js:20)']);
  const e = thrown(TypeError, 'not a function', '    at check (policy.bundle.js:4:17)\n    at derive (policy.bundle.js:99:3)\n');
  assert.equal(describeFailure(e, table), 'TypeError: not a function at check (policy.js:9)');
});

test('frames outside the bundle, or unmapped, are left out', () => {
  const stack = 'sort@self-hosted:12:3\nderive@policy.bundle.js:1:1\nderive@policy.bundle.js:4:2';
  assert.deepEqual(sourceFrames(stack, table), ['derive (policy.js:9)']);
  assert.deepEqual(sourceFrames(stack, undefined), []);
});

test('a thrown value that is not an Error says what it was', () => {
  assert.equal(
    describeFailure('no invoice', table),
    'uncaught "no invoice" (throw an Error, or a PolicyError to refuse the operation)',
  );
  assert.equal(describeFailure(Object.create(null), table).startsWith('uncaught [object Object]'), true);
});
