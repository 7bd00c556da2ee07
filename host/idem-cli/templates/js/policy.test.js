// `npm test` (node --test): the cases natively, in Node.js with the SDK's
// replica of the host (fast: run it on every edit); then through the built
// component in the host itself: `idem build` when a source changed since the
// last build, then `idem test`. Without idem on PATH (or named by $IDEM) the
// second test is skipped, and says so.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { findIdem, formatReport, runCasesFile, runComponentCases } from '@idem/policy/testing';

const here = (path) => fileURLToPath(new URL(path, import.meta.url));
const CASES = here('cases.json');

test('the cases, natively', async () => {
  const report = await runCasesFile(here('policy.js'), CASES);
  assert.ok(report.results.length > 0, 'cases.json holds no case');
  const failed = report.results.filter((r) => !r.passed);
  assert.deepEqual(failed, [], formatReport(CASES, report));
});

const idem = findIdem();
test(
  'the cases, through the built component in the host',
  { skip: idem ? false : 'idem is not on PATH (nor named by $IDEM): the component was not tested' },
  () => {
    const run = runComponentCases(here('.'), CASES, { idem });
    assert.ok(run.passed, run.output);
  },
);
