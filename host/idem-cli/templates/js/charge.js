// `{{name}}`: one charge per (tenant, customer, invoice), however often the
// job that sends it runs.
//
// - key: tenant, customer, invoice_id (the tenant scopes the others: two
//   tenants' `c1` are different customers);
// - fingerprint: amount (as a canonical decimal: "10.50", "10.5" and 10.5
//   are one amount) and currency; the same invoice with another amount is
//   not a replay, it is refused with 422;
// - partition: the customer;
// - retention: 400 days, lease: 5 minutes;
// - duplicates: Decision.standard (completed → replay, in progress → 409
//   with retry-after, lease expired → outcome-unknown for review,
//   failed-retryable → re-execute).
//
// Keep it pure: no clock (`Date.now()` is the build time inside the
// component; the operation's time is `op.nowMs`), no randomness, no Node.js
// API. Test: `npm install` once, then `npm test` (the cases, natively);
// build: `idem build`, then `idem test --policy dist/{{name}}.wasm cases.json`.

import { definePolicy, Derivation, Decision, PolicyError, DAY, MINUTE } from '@idem/policy';

const CURRENCY = /^[A-Z]{3}$/;

export const policy = definePolicy({
  describe() {
    return {
      name: '{{name}}',
      version: '0.1.0',
      namespace: '{{name}}',
      description: 'One charge per tenant, customer and invoice',
    };
  },

  derive(op) {
    if (op.kind !== 'charge') throw PolicyError.unsupportedKind(op.kind);
    const customer = op.text('customer');
    const amount = op.decimal('amount');
    if (amount.startsWith('-') || amount === '0') {
      throw PolicyError.invalid('amount', 'must be more than 0');
    }
    const currency = op.text('currency');
    if (!CURRENCY.test(currency)) {
      throw PolicyError.invalid('currency', 'must be an ISO 4217 code like EUR');
    }
    return new Derivation(customer)
      .key('tenant', op.tenant)
      .key('customer', customer)
      .key('invoice_id', op.text('invoice_id'))
      .fingerprint('amount', amount)
      .fingerprint('currency', currency)
      .retentionS(400 * DAY)
      .leaseS(5 * MINUTE);
  },

  onDuplicate(ctx) {
    return Decision.standard(ctx);
  },
});
