// Evaluated before the policy's bundle in a QuickJS component (`idem build
// --js-engine quickjs`): what the sandbox cannot serve says so, and what
// componentize-js leaves silent stays silent.
//
// - The clock: componentize-qjs stubs WASI, so QuickJS's `Date.now()` would
//   trap without a word. A policy has no clock (its time is `op.nowMs`), so
//   reading one throws an Error that names the way out, reported with the
//   policy's line as any exception is. `new Date(ms)` and `Date.UTC` read no
//   clock and work.
// - `console`: its methods do nothing, as under componentize-js with stdio
//   disabled (QuickJS's would write to a stubbed stdout, and trap).
// - `diagnostics.failing` is bound where the SDK looks for it
//   (guest/js/sdk/failure.js).

import diagnostics from 'idem:policy/diagnostics@0.1.0';

const NO_CLOCK = 'a policy has no clock: use op.nowMs';
const noClock = () => {
  throw new Error(NO_CLOCK);
};

const ClockDate = globalThis.Date;
/** `Date` without its clock: `new Date(ms)` works, `new Date()` and `Date()` throw. */
function Date(...args) {
  if (new.target === undefined || args.length === 0) noClock();
  return Reflect.construct(ClockDate, args, new.target);
}
Date.prototype = ClockDate.prototype;
Date.now = noClock;
Date.parse = ClockDate.parse;
Date.UTC = ClockDate.UTC;
Object.defineProperty(ClockDate.prototype, 'constructor', { value: Date, writable: true, configurable: true });
globalThis.Date = Date;
// QuickJS-ng's `performance.now` is read-only: the whole object is replaced.
Object.defineProperty(globalThis, 'performance', {
  value: Object.freeze({ now: noClock }),
  writable: true,
  configurable: true,
});

const silent = () => {};
globalThis.console = Object.freeze(
  Object.fromEntries(
    ['log', 'info', 'warn', 'error', 'debug', 'trace', 'dir', 'table', 'assert', 'count', 'countReset', 'group',
      'groupCollapsed', 'groupEnd', 'time', 'timeEnd', 'timeLog'].map((name) => [name, silent]),
  ),
);

globalThis[Symbol.for('idem.policy.failing')] = diagnostics.failing;
