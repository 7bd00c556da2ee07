// `billing-charge` in JavaScript: a port of guest/policies/billing-charge,
// deriving the same parts (hence the same keys) and the same decisions, and
// tested against that policy's own cases.json. One charge per (tenant,
// customer, billing period, invoice), however often the nightly job runs.
//
// - key: tenant, customer, billing_period, invoice_id (the tenant scopes the
//   others: two tenants' `c1` are different customers);
// - fingerprint: amount and currency (a re-run with another amount is not a
//   replay: it is refused with 422);
// - partition: the customer; retention 400 days, lease 5 minutes;
// - duplicates: `Decision.standard`.

import { definePolicy, Derivation, Decision, PolicyError, DAY, MINUTE } from '../../sdk/index.js';

// `2026-11`: four digits, a dash, a month 01 to 12 (Rust's `is_year_month`).
const YEAR_MONTH = /^[0-9]{4}-(0[1-9]|1[0-2])$/;
// Three ASCII capitals. Rust checks 3 bytes, all ASCII upper-case: the same
// set, since only ASCII passes the second test.
const CURRENCY = /^[A-Z]{3}$/;

export const policy = definePolicy({
  describe() {
    return {
      name: 'billing-charge',
      version: '1.0.0',
      namespace: 'billing',
      description: 'One charge per customer, billing period and invoice',
    };
  },

  derive(op) {
    if (op.kind !== 'charge') throw PolicyError.unsupportedKind(op.kind);
    const customer = op.text('customer');
    const period = op.text('billing_period');
    if (!YEAR_MONTH.test(period)) {
      throw PolicyError.invalid('billing_period', 'must be a month like 2026-11');
    }
    const currency = op.text('currency');
    if (!CURRENCY.test(currency)) {
      throw PolicyError.invalid('currency', 'must be an ISO 4217 code like EUR');
    }
    // Rust reads invoice_id and amount while building, after the checks
    // above: the same order here, so the same operation gets the same error.
    return new Derivation(customer)
      .key('tenant', op.tenant)
      .key('customer', customer)
      .key('billing_period', period)
      .key('invoice_id', op.text('invoice_id'))
      .fingerprint('amount', op.material('amount'))
      .fingerprint('currency', currency)
      .retentionS(400 * DAY)
      .leaseS(5 * MINUTE);
  },

  onDuplicate(ctx) {
    return Decision.standard(ctx);
  },
});
