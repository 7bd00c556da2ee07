// @idem/policy/testing: run a JavaScript policy natively, as the host would
// run its component. Node.js only (node:crypto, Buffer); never bundled into
// a component.

import { readFile } from 'node:fs/promises';
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { parseCasesFile, runCases, summary } from './cases.js';

export { parseCasesFile, runCases, summary } from './cases.js';
export { parseJson, JsonNumber, JsonObject, JsonSyntaxError, toCompactJson } from './json.js';
export { canonicalNumber, NumberError, MAX_CANONICAL_NUMBER_LEN } from './number.js';
export { canonicalOperation, OpError } from './operation.js';
export { encode, digest, KEY_ENCODING_VERSION } from './digest.js';
export { finish, validatePolicyInfo, MalformedError } from './derivation.js';
export { checkDecision } from './duplicate.js';
export { findIdem, runComponentCases } from './component.js';

/**
 * Imports a policy module and returns its `policy` export (the world's
 * `idem:policy/policy` interface).
 * @param {string} path
 */
export async function loadPolicy(path) {
  const module = await import(pathToFileURL(resolve(path)).href);
  if (typeof module.policy !== 'object' || module.policy === null) {
    throw new Error(`${path} has no \`policy\` export (write \`export const policy = definePolicy({...})\`)`);
  }
  return module.policy;
}

/**
 * Reads a cases file as the host does: UTF-8, strictly (a Rust
 * `read_to_string` refuses invalid UTF-8 rather than patching it).
 * @param {string} path
 */
export async function readCasesFile(path) {
  const bytes = await readFile(path);
  const text = new TextDecoder('utf-8', { fatal: true }).decode(bytes);
  return parseCasesFile(text);
}

/**
 * Runs the cases file at `casesPath` against the policy module at
 * `policyPath`: the report, one result per case.
 * @param {string} policyPath
 * @param {string} casesPath
 */
export async function runCasesFile(policyPath, casesPath) {
  const [policy, file] = await Promise.all([loadPolicy(policyPath), readCasesFile(casesPath)]);
  return runCases(policy, file);
}

/** The report as `idem test` prints it: a header, one line per case, the summary. */
export function formatReport(casesPath, report) {
  const lines = [`${casesPath}: ${report.results.length} cases`];
  for (const r of report.results) lines.push(`${r.passed ? 'ok  ' : 'FAIL'} ${r.name}: ${r.detail}`);
  lines.push(summary(report));
  return lines.join('\n');
}
