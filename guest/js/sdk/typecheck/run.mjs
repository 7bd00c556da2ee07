// The declarations held to the JavaScript, after `tsc -p typecheck`:
// - every value index.d.ts (testing/index.d.ts) declares is exported by
//   index.js (testing/index.js), and nothing is exported undeclared;
// - the TypeScript refund policy, compiled to dist/, passes its cases
//   through the SDK's JavaScript, natively as `idem test` would run them.
// Exit 1 on any difference.

import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import { runCasesFile, formatReport } from '../testing/index.js';

// Required, not imported: from this package's node_modules after `npm
// install`, or from NODE_PATH where the suite keeps its own copy
// (tests/suite/guest_types.rs); ES imports ignore NODE_PATH.
const ts = createRequire(import.meta.url)('typescript');
const sdk = fileURLToPath(new URL('..', import.meta.url));
let ok = true;

const entries = [['index.js', 'index.d.ts'], ['testing/index.js', 'testing/index.d.ts']];
// One program for both files: loading the standard library twice doubles the time.
const program = ts.createProgram(entries.map(([, dts]) => `${sdk}${dts}`), { strict: true, module: ts.ModuleKind.NodeNext, types: [] });
const checker = program.getTypeChecker();

/** The names of values (not types) a declaration file exports. */
function declaredValues(dts) {
  const module = checker.getSymbolAtLocation(program.getSourceFile(dts));
  return checker
    .getExportsOfModule(module)
    .filter((s) => (s.flags & ts.SymbolFlags.Value) !== 0)
    .map((s) => s.name);
}

for (const [js, dts] of entries) {
  const exported = new Set(Object.keys(await import(new URL(`../${js}`, import.meta.url))));
  const declared = new Set(declaredValues(`${sdk}${dts}`));
  for (const name of exported) {
    if (!declared.has(name)) { ok = false; console.error(`${js} exports \`${name}\`, which ${dts} does not declare`); }
  }
  for (const name of declared) {
    if (!exported.has(name)) { ok = false; console.error(`${dts} declares \`${name}\`, which ${js} does not export`); }
  }
  console.log(`${dts}: ${declared.size} values declared, ${exported.size} exported`);
}

const cases = fileURLToPath(new URL('../../../testdata/refund-cases.json', import.meta.url));
const report = await runCasesFile(fileURLToPath(new URL('dist/refund-policy.js', import.meta.url)), cases);
console.log(formatReport(cases, report));
if (report.results.length === 0 || report.results.some((r) => !r.passed)) ok = false;
process.exit(ok ? 0 : 1);
