// The glue between a policy written with this SDK and the `idempotency-policy`
// world as componentize-js binds it: the module's `policy` export is the
// `idem:policy/policy` interface, its methods the interface's functions in
// camelCase (`onDuplicate`), and a `result` error is whatever the export
// throws, provided it is not an `Error` (an `Error` traps). The glue wraps the
// host's records in the SDK's helpers on the way in and unwraps the SDK's
// builders and errors on the way out; an exception that escapes is reported to
// the host first (see failure.js), since the trap that follows carries no text.

import { Operation } from './operation.js';
import { Derivation } from './derivation.js';
import { PolicyError } from './errors.js';
import { reportFailure } from './failure.js';

/** @typedef {{ name: string, version: string, namespace: string, description: string }} PolicyInfo */
/**
 * What you write.
 * @typedef {{
 *   describe(): PolicyInfo,
 *   derive(op: Operation): Derivation | import('./derivation.js').DerivationRecord,
 *   onDuplicate(ctx: import('./decision.js').DuplicateContext): import('./decision.js').DecisionValue,
 * }} PolicyDefinition
 */
/**
 * What the component exports (and the native runner calls): the host's
 * records in and out.
 * @typedef {{
 *   describe(): PolicyInfo,
 *   derive(op: import('./operation.js').OperationRecord): import('./derivation.js').DerivationRecord,
 *   onDuplicate(ctx: any): import('./decision.js').DecisionValue,
 * }} PolicyExport
 */

/**
 * Turns a policy definition into the world's export. Use it once per policy:
 *
 *     export const policy = definePolicy({ describe() {...}, derive(op) {...}, onDuplicate(ctx) {...} });
 *
 * The export must be named `policy`: that is the interface's name in the world.
 * @param {PolicyDefinition} definition
 * @returns {PolicyExport}
 */
export function definePolicy(definition) {
  for (const fn of ['describe', 'derive', 'onDuplicate']) {
    if (typeof definition?.[fn] !== 'function') throw new TypeError(`a policy needs a \`${fn}\` function`);
  }
  return Object.freeze({
    describe() {
      const { name, version, namespace, description } = reported(() => definition.describe());
      return { name, version, namespace, description };
    },
    derive(op) {
      let derived;
      try {
        derived = definition.derive(new Operation(op));
      } catch (e) {
        // A typed refusal becomes `result`'s error; anything else stays an
        // exception: a bug, which the host sees as a failure with this
        // message (as a Rust panic, a trap).
        if (PolicyError.is(e)) throw e.toRecord();
        reportFailure(e);
        throw e;
      }
      return derived instanceof Derivation ? derived.toRecord() : derived;
    },
    onDuplicate(ctx) {
      return reported(() => definition.onDuplicate({ ...ctx, operation: new Operation(ctx.operation) }));
    },
  });
}

/**
 * `f()`, reporting an exception to the host before it escapes.
 * @template T
 * @param {() => T} f
 * @returns {T}
 */
function reported(f) {
  try {
    return f();
  } catch (e) {
    reportFailure(e);
    throw e;
  }
}
