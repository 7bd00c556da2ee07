// Where a policy's exception came from, natively: the same words the host
// shows for a built component (`TypeError: op.txt is not a function at check
// (policy.js:5)`, see ../failure.js), read from V8's stack instead of the
// bundle's line table. Without it the runner's report would name only the
// cases file, and the author would look for the fault there.

import { spawnSync } from 'node:child_process';
import { relative, isAbsolute } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

/** The SDK's own directory: frames in it are named `@idem/policy/…`. */
const SDK_DIR = fileURLToPath(new URL('../', import.meta.url));

/** Frames named in a report, as the host names them: up to the first in the policy's own files. */
const MAX_FRAMES = 4;

/**
 * One line, as the host says it: the exception's type and message, then its
 * innermost frames up to the first in the policy's own files.
 * @param {unknown} thrown
 * @returns {string}
 */
export function describeThrown(thrown) {
  if (!(thrown instanceof Error)) {
    let shown;
    try {
      shown = typeof thrown === 'string' ? JSON.stringify(thrown) : String(thrown);
    } catch {
      shown = Object.prototype.toString.call(thrown);
    }
    return `uncaught ${shown} (throw an Error, or a PolicyError to refuse the operation)`;
  }
  const what = `${thrown.name}: ${thrown.message}`;
  const frames = typeof thrown.stack === 'string' ? placedFrames(thrown.stack) : [];
  // Only the runner's own frames (the SDK refusing a module without a
  // `policy` export): the message says it all.
  if (frames.every((f) => f.sdk)) return what;
  return `${what} at ${frames.map((f) => f.shown).join(' ← ')}`;
}

/**
 * V8's stack (`    at name (file:///…:line:column)` a line), innermost
 * first, up to the first frame outside the SDK; Node.js's own frames are
 * skipped.
 * @param {string} stack
 * @returns {string[]}
 */
export function nativeFrames(stack) {
  return placedFrames(stack).map((f) => f.shown);
}

/** @returns {Array<{ shown: string, sdk: boolean }>} */
function placedFrames(stack) {
  const frames = [];
  for (const text of stack.split('\n')) {
    const m = /^\s*at (?:(.*?) \()?(file:\/\/\/.*?):(\d+):\d+\)?$/.exec(text);
    if (!m) continue;
    const [, name, url, line] = m;
    const place = shownPath(url);
    frames.push({ shown: `${shortName(name)} (${place.file}:${line})`, sdk: place.sdk });
    if (!place.sdk || frames.length >= MAX_FRAMES) break;
  }
  return frames;
}

/** V8 names a method of an object literal `Object.derive`; the host, `derive`. */
function shortName(name) {
  if (!name) return '<module>';
  return name.replace(/^async /, '').replace(/^Object\./, '');
}

/**
 * A file as the author knows it: `@idem/policy/…` in the SDK, else relative
 * to the working directory when inside it, else absolute.
 * @param {string} url
 * @returns {{ file: string, sdk: boolean }}
 */
function shownPath(url) {
  const path = fileURLToPath(url);
  const inSdk = relative(SDK_DIR, path);
  if (!inSdk.startsWith('..') && !isAbsolute(inSdk)) {
    return { file: `@idem/policy/${inSdk.split('\\').join('/')}`, sdk: true };
  }
  const here = relative(process.cwd(), path);
  return { file: here.startsWith('..') || isAbsolute(here) ? path : here, sdk: false };
}

/**
 * Why a policy module failed to load, naming its file and line. A syntax
 * error in a module loaded by `import()` carries no place in V8's stack, but
 * Node.js prints it when the same import fails uncaught: so it is imported
 * once more in a child process, and the place read from what that prints.
 * @param {string} path the policy module
 * @param {unknown} thrown what its import threw
 * @returns {string}
 */
export function describeLoadFailure(path, thrown) {
  if (!(thrown instanceof SyntaxError) || nativeFrames(thrown.stack ?? '').length > 0) {
    return describeThrown(thrown);
  }
  const child = spawnSync(process.execPath, ['--input-type=module', '-e', `await import(${JSON.stringify(pathToFileURL(path).href)})`], {
    encoding: 'utf8',
  });
  // `file:///…/policy.js:LINE`, the source line, a caret, a blank line, the error.
  const lines = (child.stderr ?? '').split('\n');
  const head = /^(file:\/\/\/.*):(\d+)$/.exec(lines[0] ?? '');
  const error = lines.findIndex((l) => l.startsWith('SyntaxError'));
  if (!head || error < 0) return describeThrown(thrown);
  const file = shownPath(head[1]).file;
  const source = lines.slice(1, error).filter((l) => l.trim() !== '');
  return [`${lines[error]} at ${file}:${head[2]}`, ...source].join('\n');
}
