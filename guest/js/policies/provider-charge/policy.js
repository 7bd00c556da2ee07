// `provider-charge` in JavaScript: a port of guest/policies/provider-charge,
// deriving the same parts and decisions, tested against its cases.json.
//
// A charge sent to a payment provider that deduplicates by the idempotency
// key it is given and refuses a fencing token lower than one it has already
// seen. The effect is idempotent downstream, so an attempt whose outcome
// nobody knows can safely be sent again (compare `billing-charge`, which
// sends an expired claim to review instead).
//
// - key: tenant, customer, billing_period, invoice_id; fingerprint: amount
//   and currency; partition: the customer; retention 400 days, lease 5 min;
// - duplicates: completed → replay; in progress → 409 with retry-after;
//   lease expired, outcome-unknown or failed-retryable → re-execute.

import { definePolicy, Derivation, Decision, PolicyError, RecordState, DAY, MINUTE } from '../../sdk/index.js';

export const policy = definePolicy({
  describe() {
    return {
      name: 'provider-charge',
      version: '1.0.0',
      namespace: 'payments',
      description: 'One charge per invoice through a provider that deduplicates by key and fence',
    };
  },

  derive(op) {
    if (op.kind !== 'charge') throw PolicyError.unsupportedKind(op.kind);
    const customer = op.text('customer');
    return new Derivation(customer)
      .key('tenant', op.tenant)
      .key('customer', customer)
      .key('billing_period', op.text('billing_period'))
      .key('invoice_id', op.text('invoice_id'))
      .fingerprint('amount', op.material('amount'))
      .fingerprint('currency', op.text('currency'))
      .retentionS(400 * DAY)
      .leaseS(5 * MINUTE);
  },

  onDuplicate(ctx) {
    if (!ctx.fingerprintMatches) return Decision.standard(ctx);
    // The provider refuses the deposed holder's late request by its fence and
    // answers ours from its record if it already charged.
    if (ctx.state === RecordState.InProgress && Number(ctx.leaseRemainingMs) === 0) return Decision.reExecute();
    if (ctx.state === RecordState.OutcomeUnknown) return Decision.reExecute();
    return Decision.standard(ctx);
  },
});
