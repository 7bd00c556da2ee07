// Wrong uses the declarations must refuse. Each `@ts-expect-error` fails the
// check when the line below it compiles: a declaration loosened to `any`
// would let these through unnoticed.

import { Decision, Derivation, PolicyError, RecordState, canonicalDecimal, definePolicy, type DuplicateContext, type Operation } from '@idem/policy';
import { canonicalNumber, type Report } from '@idem/policy/testing';

export function misuses(op: Operation, ctx: DuplicateContext, report: Report): unknown[] {
  return [
    // @ts-expect-error a typo of an accessor (`text`)
    op.txt('customer'),
    // @ts-expect-error accessors take a field name
    op.decimal(1),
    // @ts-expect-error nowMs is a BigInt: adding a Number is a mistake
    op.nowMs + 1,
    // @ts-expect-error a record state misspelt (`completed`)
    ctx.state === 'complete',
    // @ts-expect-error a record state in the wrong case (`InProgress`)
    RecordState.IN_PROGRESS,
    // @ts-expect-error the context's Python spelling
    ctx.fingerprint_matches,
    // @ts-expect-error a wait is a duration in ms, not text
    Decision.wait('2s'),
    // @ts-expect-error a rejection needs a reason
    Decision.reject(409),
    // @ts-expect-error the decision is `reExecute`
    Decision.retry(),
    // @ts-expect-error material is text: a number would be another key
    new Derivation('c1').key('amount', 10.5),
    // @ts-expect-error there is no `.retention` (it is `retentionS`)
    new Derivation('c1').retention(30),
    // @ts-expect-error an error code outside the contract
    new PolicyError('not-found', undefined, 'no such refund'),
    // @ts-expect-error canonicalDecimal takes text, never a float
    canonicalDecimal(10.5),
    // @ts-expect-error canonicalNumber returns text
    canonicalNumber('1e2') * 2,
    // @ts-expect-error a report's results are read-only
    report.results.push({ name: 'x', passed: true, detail: '' }),
    // @ts-expect-error a policy needs all three functions
    definePolicy({ describe: () => ({ name: 'n', version: '1.0.0', namespace: 'n', description: '' }) }),
    definePolicy({
      describe: () => ({ name: 'n', version: '1.0.0', namespace: 'n', description: '' }),
      derive: (o) => new Derivation(o.text('customer')).key('customer', o.text('customer')),
      // @ts-expect-error onDuplicate returns a decision, not its name
      onDuplicate: () => 'replay',
    }),
  ];
}
