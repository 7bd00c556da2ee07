// The native harness as a TypeScript author's test would call it (checked
// for types only; run.mjs runs the same calls).

import { canonicalNumber, findIdem, formatReport, readCasesFile, runCases, runComponentCases, summary, type Report } from '@idem/policy/testing';
import { policy } from './refund-policy.js';

/** The refund policy's cases, run natively: the printed report and whether every case passed. */
export async function refundCases(casesPath: string): Promise<{ text: string; passed: boolean }> {
  const report: Report = runCases(policy, await readCasesFile(casesPath));
  const passed = report.results.length > 0 && report.results.every((r) => r.passed);
  return { text: `${formatReport(casesPath, report)}\n${summary(report)}`, passed };
}

/** Amounts sent as JSON numbers reach the policy canonical, as text. */
export const hundred: string = canonicalNumber('1.00E+2');

/** The same cases through the built component, in the host; `undefined` where idem is not installed. */
export function componentCases(projectDir: string, casesPath: string): boolean | undefined {
  const idem = findIdem();
  if (idem === undefined) return undefined;
  const run = runComponentCases(projectDir, casesPath, { idem });
  return run.passed && run.component.endsWith('.wasm');
}
