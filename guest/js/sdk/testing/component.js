// The cases through the built component: `idem build` (when a source is newer
// than the component) and `idem test`, the host's own verdict beside the
// native runner's. The native runner replicates the host in Node.js; this is
// the host itself, so a divergence between the two shows in `npm test`, not
// first in production. Node.js only.

import { spawnSync } from 'node:child_process';
import { accessSync, constants, readFileSync, readdirSync, statSync } from 'node:fs';
import { delimiter, join, resolve } from 'node:path';

/**
 * The `idem` CLI: `$IDEM`, else `idem` on `PATH`; `undefined` when there is
 * none (the component cannot be tested here).
 * @param {NodeJS.ProcessEnv} [env]
 * @returns {string | undefined}
 */
export function findIdem(env = process.env) {
  if (env.IDEM) return env.IDEM;
  for (const dir of (env.PATH ?? '').split(delimiter)) {
    if (!dir) continue;
    const candidate = join(dir, 'idem');
    try {
      accessSync(candidate, constants.X_OK);
      if (statSync(candidate).isFile()) return candidate;
    } catch {
      // Not here.
    }
  }
  return undefined;
}

/** Entries a build never reads: its output, installed packages, tools' state. */
const NOT_SOURCES = new Set(['dist', 'node_modules']);

/** The newest modification time of the project's sources, in ms. */
function newestSource(dir) {
  let newest = 0;
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    if (entry.name.startsWith('.') || NOT_SOURCES.has(entry.name)) continue;
    const path = join(dir, entry.name);
    if (entry.isDirectory()) newest = Math.max(newest, newestSource(path));
    else if (entry.isFile()) newest = Math.max(newest, statSync(path).mtimeMs);
  }
  return newest;
}

/** Runs idem, its output as text (a spawn failure as the status `null`). */
function run(idem, args) {
  const r = spawnSync(idem, args, { encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 });
  if (r.error) return { status: null, output: `cannot run ${idem}: ${r.error.message}` };
  return { status: r.status, output: `${r.stdout}${r.stderr}` };
}

/**
 * Runs the cases file at `casesPath` against the project's built component,
 * as the host runs it: `idem build PROJECT` first when `dist/NAME.wasm` is
 * missing or older than a file of the project (outside `dist/`,
 * `node_modules/` and dot entries; the cases file is built in as golden
 * vectors), then `idem test --policy dist/NAME.wasm CASES`.
 * @param {string} projectDir the directory of the policy's `package.json`
 * @param {string} casesPath
 * @param {{ idem?: string }} [options] `idem`: the CLI (default {@link findIdem})
 * @returns {{ component: string, built: boolean, passed: boolean, output: string }}
 *   `output`: what idem printed (the build's when it failed, else the test's)
 */
export function runComponentCases(projectDir, casesPath, options = {}) {
  const idem = options.idem ?? findIdem();
  if (!idem) throw new Error('idem is not on PATH (nor named by $IDEM): the component cannot be tested');
  const dir = resolve(projectDir);
  const manifest = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8'));
  // As `idem build` names it: `@acme/refunds` → `refunds`.
  const name = String(manifest.name).split('/').at(-1);
  const component = join(dir, 'dist', `${name}.wasm`);
  let builtAt = 0;
  try {
    builtAt = statSync(component).mtimeMs;
  } catch {
    // Not built yet.
  }
  const built = builtAt <= newestSource(dir);
  if (built) {
    const build = run(idem, ['build', dir]);
    if (build.status !== 0) return { component, built, passed: false, output: `idem build failed:\n${build.output}` };
  }
  const tested = run(idem, ['test', '--policy', component, resolve(casesPath)]);
  return { component, built, passed: tested.status === 0, output: tested.output };
}
