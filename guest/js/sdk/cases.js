#!/usr/bin/env node
// The native cases runner: `node cases.js POLICY.js CASES.json` runs a cases
// file against a JavaScript policy in Node.js, with the host's
// canonicalisation, key encoding and safety gate, and prints what `idem
// test` prints. Exit 0 when every case passes, 1 when one fails (or the file
// has none: a file that checks nothing proves nothing), 2 on a usage error or
// a file that is not a cases file.

import { loadPolicy, readCasesFile, runCases, formatReport } from './testing/index.js';
import { describeLoadFailure } from './testing/frames.js';

const [policyPath, casesPath, ...rest] = process.argv.slice(2);
if (!policyPath || !casesPath || rest.length > 0) {
  console.error('usage: idem-js-cases POLICY.js CASES.json');
  process.exit(2);
}

// Each file's fault is told under its own name: a policy that does not load
// (a syntax error, a throw at its top level, no `policy` export) is not the
// cases file's fault, and its message names the policy's file and line.
let policy;
try {
  policy = await loadPolicy(policyPath);
} catch (e) {
  console.error(`${policyPath}: the policy does not load: ${describeLoadFailure(policyPath, e)}`);
  process.exit(2);
}
let file;
try {
  file = await readCasesFile(casesPath);
} catch (e) {
  console.error(`${casesPath}: ${e.message}`);
  process.exit(2);
}
const report = runCases(policy, file);
console.log(formatReport(casesPath, report));
const failed = report.results.some((r) => !r.passed) || report.results.length === 0;
// Not `process.exit`: into a pipe, stdout is written asynchronously, and
// exiting at once cut a long report (a thousand cases) before its summary.
process.exitCode = failed ? 1 : 0;
