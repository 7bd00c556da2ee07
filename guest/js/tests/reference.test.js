// The reference page (docs/guide/sdk-reference-javascript.md) against the
// SDK: every name the SDK exports, every name its declarations give (types
// included), every field of the duplicate context, every accessor and
// decision, and every record-state spelling appears on the page. A name
// added to the SDK and not to the page fails here.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import * as sdk from '../sdk/index.js';
import * as testing from '../sdk/testing/index.js';

const read = (rel) => readFileSync(new URL(rel, import.meta.url), 'utf8');
const page = read('../../../docs/guide/sdk-reference-javascript.md');

// The page's code spans; one without a call in it is split on `,` (a row
// may name two: `Replay, ReExecute`).
const spans = [...page.matchAll(/`([^`]+)`/g)].flatMap((m) => (m[1].includes('(') ? [m[1]] : m[1].split(',').map((s) => s.trim())));

/**
 * Whether the page documents `name`: a code span that is the name, or the
 * name called or reached through an object (`Decision.wait(ms)`, `op.text(name)`,
 * `ctx.state`, `.leaseS(seconds)`).
 */
function documented(name) {
  const escaped = name.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  const re = new RegExp(`^(?:[\\w.]*\\.)?${escaped}(?:\\(.*\\))?$`);
  return spans.some((s) => re.test(s));
}

const missing = (names) => names.filter((n) => !documented(n));

/** Every name a declaration file exports: values and types. */
function declared(dts) {
  return [...read(dts).matchAll(/^export (?:declare )?(?:function|class|const|interface|type) (\w+)/gm)].map((m) => m[1]);
}

/** The members of an interface in a declaration file. */
function members(dts, name) {
  const body = read(dts).match(new RegExp(`export interface ${name} [^{]*\\{([^}]*)\\}`))?.[1];
  assert.ok(body, `${dts} has no interface ${name}`);
  return [...body.matchAll(/readonly (\w+):/g)].map((m) => m[1]);
}

test('every export of @idem/policy and @idem/policy/testing is on the page', () => {
  const names = [...Object.keys(sdk), ...Object.keys(testing)];
  assert.ok(names.length > 40, `only ${names.length} exports found`);
  assert.deepEqual(missing(names), []);
});

test('every declared name, types included, is on the page', () => {
  const names = [...declared('../sdk/index.d.ts'), ...declared('../sdk/testing/index.d.ts')];
  assert.ok(names.includes('DuplicateContext') && names.includes('CasesFile'), names.join(' '));
  assert.deepEqual(missing(names), []);
});

test('every field of the duplicate context and of its outcome is on the page', () => {
  const fields = members('../sdk/index.d.ts', 'DuplicateContext');
  assert.deepEqual(fields, ['operation', 'state', 'fingerprintMatches', 'attempts', 'ageMs', 'leaseRemainingMs', 'outcome']);
  assert.deepEqual(missing(fields.map((f) => `ctx.${f}`)), []);
  for (const f of members('../sdk/index.d.ts', 'OutcomeSummary')) assert.match(page, new RegExp(`\\b${f}\\b`), f);
});

test('every accessor, builder method, error constructor and decision is on the page', () => {
  const methods = (cls) => Object.getOwnPropertyNames(cls.prototype).filter((n) => n !== 'constructor');
  const statics = (cls) => Object.getOwnPropertyNames(cls).filter((n) => typeof cls[n] === 'function');
  const op = new sdk.Operation({ kind: 'k', tenant: 't', fields: [], run: undefined, nowMs: 0n });
  const names = [
    ...methods(sdk.Operation),
    ...Object.keys(op),
    ...methods(sdk.Derivation),
    ...statics(sdk.PolicyError),
    ...Object.keys(sdk.Decision).map((d) => `Decision.${d}`),
  ];
  assert.ok(names.includes('Decision.wait') && names.includes('decimal') && names.includes('nowMs'), names.join(' '));
  assert.deepEqual(missing(names), []);
});

test('every record state is on the page by name and by spelling', () => {
  for (const [name, spelling] of Object.entries(sdk.RecordState)) {
    assert.ok(documented(`RecordState.${name}`), name);
    assert.ok(page.includes(`\`'${spelling}'\``), spelling);
  }
  assert.equal(Object.keys(sdk.RecordState).length, 5);
});
