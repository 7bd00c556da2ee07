// The native runner: the three example policies against the Rust policies'
// own cases files, and the runner's verdicts on a broken policy (as
// guest/sdk/src/testing.rs checks them for Rust).

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { runCasesFile, runCases, parseCasesFile, loadPolicy } from '../sdk/testing/index.js';

const here = (p) => fileURLToPath(new URL(p, import.meta.url));
const RUST_POLICIES = here('../../policies/');

for (const [name, count] of [['billing-charge', 17], ['provider-charge', 11], ['http-idempotency-key', 14]]) {
  test(`${name} (JavaScript) passes the Rust policy's cases.json`, async () => {
    const report = await runCasesFile(here(`../policies/${name}/policy.js`), `${RUST_POLICIES}${name}/cases.json`);
    assert.equal(report.results.length, count);
    assert.deepEqual(report.results.filter((r) => !r.passed), []);
  });
}

test('the CLI prints one line per case and the summary, and exits 0', () => {
  const out = execFileSync(process.execPath, [here('../sdk/cases.js'), here('../policies/billing-charge/policy.js'), `${RUST_POLICIES}billing-charge/cases.json`], { encoding: 'utf8' });
  const lines = out.trim().split('\n');
  assert.equal(lines.length, 1 + 17 + 1);
  assert.match(lines[1], /^ok {3}seed charge: key 7ac249ecd5b53b49…$/);
  assert.equal(lines.at(-1), '17 passed, 0 failed');
});

test('a cases file for another policy fails at describe, and the CLI exits 1', () => {
  let status;
  try {
    execFileSync(process.execPath, [here('../sdk/cases.js'), here('../policies/provider-charge/policy.js'), `${RUST_POLICIES}billing-charge/cases.json`], { stdio: 'pipe' });
  } catch (e) {
    status = e.status;
    assert.match(e.stdout.toString(), /FAIL describe: the cases are for policy `billing-charge`, this is `provider-charge`/);
  }
  assert.equal(status, 1);
});

const op = (invoice, extra = {}) => ({ kind: 'charge', tenant: 't', fields: { invoice, ...extra } });

test('a throw or a wrong expectation fails one case only (testing.rs)', async () => {
  const policy = await loadPolicy(here('fixtures/fragile-policy.js'));
  const file = parseCasesFile(JSON.stringify({ cases: [
    { name: 'wrong expected key', op: op('a'), expect: { key: '00'.repeat(32) } },
    { name: 'same as the wrong one', op: op('a'), expect: { same_key_as: 'wrong expected key' } },
    { name: 'panics', op: op('boom'), expect: { partition: 'boom' } },
    { name: 'after the panic', op: op('b'), expect: { partition: 'b' } },
    { name: 'compares with the panic', op: op('b'), expect: { same_key_as: 'panics' } },
    { name: 'duplicate panics', op: op('c'), duplicate: { state: 'completed', fingerprint_matches: true }, expect: { decision: 'replay' } },
    { name: 'a lease the contract cannot carry', op: op('number-lease'), expect: { partition: 'number-lease' } },
    { name: 'checks nothing', op: op('d'), expect: {} },
    { name: 'invalid op', op: { kind: 'charge', tenant: 't', colour: 'red' }, expect: { partition: 'x' } },
  ] }));
  const report = runCases(policy, file);
  assert.deepEqual(report.results.map((r) => [r.name, r.passed]), [
    ['wrong expected key', false],
    ['same as the wrong one', true],
    ['panics', false],
    ['after the panic', true],
    ['compares with the panic', false],
    ['duplicate panics', false],
    ['a lease the contract cannot carry', false],
    ['checks nothing', false],
    ['invalid op', false],
  ]);
  const detail = (i) => report.results[i].detail;
  // The exception's type and the policy's own file and line, as the host
  // names them (the path relative to the working directory when inside it).
  const fragile = readFileSync(here('fixtures/fragile-policy.js'), 'utf8').split('\n');
  const lineOf = (marker) => fragile.findIndex((l) => l.includes(marker)) + 1;
  const at = (fn, marker) => new RegExp(`at ${fn} \\((?:.*/)?fixtures/fragile-policy\\.js:${lineOf(marker)}\\)$`);
  assert.match(detail(2), /threw in derive \(in the host: a trap\): Error: invoice boom is not supported at /);
  assert.match(detail(2), at('derive', "'invoice boom is not supported'"));
  assert.match(detail(4), /failed without deriving a key/);
  assert.match(detail(5), /threw in on-duplicate \(in the host: a trap\): Error: no duplicates here at /);
  assert.match(detail(5), at('onDuplicate', "'no duplicates here'"));
  assert.match(detail(6), /1\.5 \(number\) as leaseS, which the contract cannot carry/);
  assert.match(detail(7), /checks nothing/);
  assert.match(detail(8), /the case's op is invalid: .*unknown field `colour`/);
});

test('number spellings in a cases file reach the policy canonical, never as doubles', async () => {
  const policy = await loadPolicy(here('../policies/billing-charge/policy.js'));
  const fields = (amount) => `{"customer":"c1","billing_period":"2026-11","invoice_id":"i1","currency":"EUR","amount":${amount}}`;
  const c = (name, amount, expect) => `{"name":"${name}","op":{"kind":"charge","tenant":"acme","fields":${fields(amount)}},"expect":${expect}}`;
  // 12345678901234567890.125 is 12345678901234567000 as a double.
  const file = parseCasesFile(`{"cases":[
    ${c('text', '"12345678901234567890.125"', '{"partition":"c1"}')},
    ${c('number', '12345678901234567890.125', '{"same_fingerprint_as":"text"}')},
    ${c('exponent', '1234567890123456789012.5e-2', '{"same_fingerprint_as":"text"}')},
    ${c('rounded', '12345678901234567000', '{"fingerprint_differs_from":"text"}')},
    ${c('too long', '1e400', '{"partition":"c1"}')}
  ]}`);
  const report = runCases(policy, file);
  assert.deepEqual(report.results.map((r) => r.passed), [true, true, true, true, false]);
  assert.match(report.results[4].detail, /send it as a string/);
});

test('a repeated field inside a case\'s op is collapsed (last wins), as the host\'s runner reads `op` through serde_json::Value', async () => {
  const policy = await loadPolicy(here('../policies/billing-charge/policy.js'));
  const fields = '"customer":"c1","billing_period":"2026-11","invoice_id":"i1","currency":"EUR"';
  const file = parseCasesFile(`{"cases":[
    {"name":"once","op":{"kind":"charge","tenant":"acme","fields":{${fields},"amount":"7"}},"expect":{"partition":"c1"}},
    {"name":"twice","op":{"kind":"charge","tenant":"acme","fields":{${fields},"amount":"1","amount":"7"}},"expect":{"same_fingerprint_as":"once"}}
  ]}`);
  assert.deepEqual(runCases(policy, file).results.map((r) => r.passed), [true, true]);
});

test('a cases file with an unknown member is not a cases file', () => {
  assert.throws(() => parseCasesFile('{"cases":[],"colour":1}'), /unknown field `colour`/);
  assert.throws(() => parseCasesFile('{"cases":[{"name":"a","op":{},"expect":{"keys":"x"}}]}'), /unknown field `keys`/);
});

// The CLI, run where an author runs `npm test`: the policy's own faults are
// told under the policy's name with its file and line, never blamed on
// cases.json.
test('the CLI names the policy\'s file and line for its own faults, not the cases file', () => {
  const dir = mkdtempSync(join(tmpdir(), 'idem-js-cases-'));
  const sdk = pathToFileURL(here('../sdk/index.js')).href;
  const source = (body) => `import { definePolicy, Derivation, Decision } from ${JSON.stringify(sdk)};
export const policy = definePolicy({
  describe: () => ({ name: 'p', version: '1.0.0', namespace: 'p', description: 'p' }),
  derive(op) {
    ${body}
  },
  onDuplicate: (ctx) => Decision.standard(ctx),
});
`;
  writeFileSync(join(dir, 'cases.json'), JSON.stringify({ cases: [{ name: 'one', op: { kind: 'k', tenant: 't', fields: { id: '1' } }, expect: { partition: 't' } }] }));
  const run = (name, body) => {
    writeFileSync(join(dir, name), body);
    return spawnSync(process.execPath, [here('../sdk/cases.js'), name, 'cases.json'], { cwd: dir, encoding: 'utf8' });
  };

  // A throw while a case runs: the case fails with the policy's line.
  const thrown = run('thrown.js', source("return op.txt('id'); // TYPO"));
  assert.equal(thrown.status, 1, thrown.stderr);
  assert.match(thrown.stdout, /FAIL one: the policy threw in derive \(in the host: a trap\): TypeError: op\.txt is not a function at derive \(thrown\.js:5\)$/m);

  // A syntax error: Node.js's message under the policy's name, with its line.
  const broken = run('broken.js', source("return op.text('id') +; // TYPO"));
  assert.equal(broken.status, 2, broken.stderr);
  assert.match(broken.stderr, /^broken\.js: the policy does not load: SyntaxError: Unexpected token ';' at broken\.js:5\n/);
  assert.doesNotMatch(broken.stderr, /cases\.json/);

  // A throw at the module's top level, and no `policy` export.
  const top = run('top.js', `${source("return new Derivation('t');")}process.env.X.trim(); // TOP\n`);
  assert.equal(top.status, 2, top.stderr);
  assert.match(top.stderr, /^top\.js: the policy does not load: TypeError: .* at <module> \(top\.js:9\)$/m);
  const unexported = run('unexported.js', source("return new Derivation('t');").replace('export const policy', 'const policy'));
  assert.equal(unexported.status, 2, unexported.stderr);
  assert.match(unexported.stderr, /^unexported\.js: the policy does not load: Error: unexported\.js has no `policy` export/);
});
