// How a policy's uncaught exception reaches the host. A wasm trap carries no
// text: an exception that escapes an export traps, and the host would see a
// bare `unreachable`. So before the export lets one escape, it hands the
// exception's type, message and the policy's own file and line to the host
// through the contract's `diagnostics.failing` import. `idem build` binds that
// import to `globalThis[FAILING]` and puts the bundle's line table (bundle
// line → source file and line, from esbuild's source map) at
// `globalThis[SOURCE_LINES]`. Natively nothing is bound and the exception
// speaks for itself.

/** Where the build puts the host's `failing` function. */
export const FAILING = Symbol.for('idem.policy.failing');
/** Where the build puts the bundle's line table. */
export const SOURCE_LINES = Symbol.for('idem.policy.sourceLines');

/** Frames named in a report: the innermost, up to the first in the policy's own files. */
const MAX_FRAMES = 4;

/**
 * Tells the host why the call is about to fail, when a host is listening.
 * Never throws: the report must not hide the failure it reports.
 * @param {unknown} thrown
 */
export function reportFailure(thrown) {
  const failing = globalThis[FAILING];
  if (typeof failing !== 'function') return;
  try {
    failing(describeFailure(thrown, globalThis[SOURCE_LINES]));
  } catch {
    // Nothing to do: the exception itself still traps.
  }
}

/**
 * One line: the exception's type and message, then where it was thrown, in
 * the policy's sources (`at derive (policy.js:9)`).
 * @param {unknown} thrown
 * @param {{ bundle: string, files: string[], lines: number[] } | undefined} table
 * @returns {string}
 */
export function describeFailure(thrown, table) {
  let what;
  if (thrown instanceof Error) {
    what = `${thrown.name}: ${thrown.message}`;
  } else {
    let shown;
    try {
      shown = typeof thrown === 'string' ? JSON.stringify(thrown) : String(thrown);
    } catch {
      shown = Object.prototype.toString.call(thrown);
    }
    what = `uncaught ${shown} (throw an Error, or a PolicyError to refuse the operation)`;
  }
  const frames = thrown instanceof Error && typeof thrown.stack === 'string' ? sourceFrames(thrown.stack, table) : [];
  return frames.length === 0 ? what : `${what} at ${frames.join(' ← ')}`;
}

/**
 * The stack of either engine a policy is built into, innermost first:
 * SpiderMonkey's (`name@file:line:column` a line) or QuickJS's (`at name
 * (file:line:column)`, or `at file:line:column`). Mapped to the policy's
 * sources: up to the first frame in the policy's own files (not the SDK's).
 * @param {string} stack
 * @param {{ bundle: string, files: string[], lines: number[] } | undefined} table
 * @returns {string[]}
 */
export function sourceFrames(stack, table) {
  const frames = [];
  for (const text of stack.split('\n')) {
    const m = /^(.*)@(.*):(\d+):(\d+)$/.exec(text.trim()) ?? quickJsFrame(text.trim());
    if (!m) continue;
    const [, name, file, line] = m;
    const place = sourcePlace(file, Number(line), table);
    if (!place) continue;
    frames.push(`${name || '<module>'} (${place.file}:${place.line})`);
    if (!place.sdk || frames.length >= MAX_FRAMES) break;
  }
  return frames;
}

/**
 * A QuickJS frame as SpiderMonkey's match: `[, name, file, line, column]`.
 * @param {string} text
 * @returns {string[] | null}
 */
function quickJsFrame(text) {
  const m = /^at (?:(.*) \((.*):(\d+):(\d+)\)|(.*):(\d+):(\d+))$/.exec(text);
  if (!m) return null;
  return m[2] !== undefined ? [m[0], m[1] === '<anonymous>' ? '' : m[1], m[2], m[3], m[4]] : [m[0], '', m[5], m[6], m[7]];
}

/**
 * @param {string} file
 * @param {number} line
 * @param {{ bundle: string, files: string[], lines: number[] } | undefined} table
 * @returns {{ file: string, line: number, sdk: boolean } | null}
 */
function sourcePlace(file, line, table) {
  if (!table || !file.endsWith(table.bundle)) return null;
  const index = table.lines[(line - 1) * 2];
  if (index === undefined || index < 0) return null;
  const source = table.files[index];
  return { file: source, line: table.lines[(line - 1) * 2 + 1], sdk: source.startsWith('@idem/policy/') };
}
