// A refund policy in TypeScript, as an author writes one against
// `@idem/policy` (the scenario): the key from the customer, the
// charge and the refund; the amount and currency as the fingerprint; a
// duplicate waits while the refund is in progress, is run again after a
// retryable failure, goes to review after an expired claim; a missing id or a
// negative amount is refused. No annotation is needed: `definePolicy` types
// `op` and `ctx`.

import { DAY, Decision, Derivation, MINUTE, PolicyError, RecordState, definePolicy } from '@idem/policy';

const CURRENCY = /^[A-Z]{3}$/;

export const policy = definePolicy({
  describe() {
    return { name: 'refunds', version: '1.0.0', namespace: 'refunds', description: 'One refund per charge and refund id' };
  },

  derive(op) {
    if (op.kind !== 'refund') throw PolicyError.unsupportedKind(op.kind);
    const customer = op.text('customer');
    const amount = op.decimal('amount');
    if (amount.startsWith('-')) throw PolicyError.invalid('amount', 'must not be negative');
    const currency = op.text('currency');
    if (!CURRENCY.test(currency)) throw PolicyError.invalid('currency', 'must be an ISO 4217 code like EUR');
    return new Derivation(customer)
      .key('customer', customer)
      .key('charge_id', op.text('charge_id'))
      .key('refund_id', op.text('refund_id'))
      .fingerprint('amount', amount)
      .fingerprint('currency', currency)
      .retentionS(90 * DAY)
      .leaseS(2 * MINUTE);
  },

  onDuplicate(ctx) {
    if (!ctx.fingerprintMatches) return Decision.standard(ctx);
    switch (ctx.state) {
      case RecordState.InProgress:
        // A live claim: let the duplicate wait for it (2 s a round); an
        // expired one may have refunded already, so a person decides.
        return ctx.leaseRemainingMs > 0n
          ? Decision.wait(2000)
          : Decision.markUnknown(409, 'the refund may have been made; it needs review');
      case 'failed-retryable':
        return Decision.reExecute();
      case 'completed':
      case 'failed-permanent':
      case 'outcome-unknown':
        return Decision.standard(ctx);
      default: {
        // Exhaustive: a new record state is a compile error here.
        const unknown: never = ctx.state;
        throw new TypeError(`unknown record state ${String(unknown)}`);
      }
    }
  },
});
