"""`provider-charge`, ported from guest/policies/provider-charge: a charge sent
to a payment provider that deduplicates by the idempotency key and refuses a
fencing token lower than one it has seen for that key.

The effect is idempotent downstream, so an attempt whose outcome nobody knows
can safely be sent again: the provider answers a repeat from its own record,
and a deposed holder that wakes up late is refused by the provider (lower
fence) and by the store. Compare billing-charge, which sends an expired claim
to review instead.

- key: tenant, customer, billing_period, invoice_id; fingerprint: amount and
  currency; partition: the customer; retention 400 days; lease 5 minutes;
- duplicates: completed → replay; in progress → 409 with retry-after; lease
  expired, outcome-unknown or failed-retryable → re-execute.
"""

from idem_policy import (
    DAY,
    MINUTE,
    Decision,
    Derivation,
    Policy,
    PolicyError,
    PolicyInfo,
    RecordState,
    export,
)


class ProviderCharge(Policy):
    def describe(self):
        return PolicyInfo(
            "provider-charge",
            "1.0.0",
            "payments",
            "One charge per invoice through a provider that deduplicates by key and fence",
        )

    def derive(self, op):
        if op.kind != "charge":
            raise PolicyError.unsupported_kind(op.kind)
        customer = op.text("customer")
        return (
            Derivation(customer)
            .key("tenant", op.tenant)
            .key("customer", customer)
            .key("billing_period", op.text("billing_period"))
            .key("invoice_id", op.text("invoice_id"))
            .fingerprint("amount", op.material("amount"))
            .fingerprint("currency", op.text("currency"))
            .retention_s(400 * DAY)
            .lease_s(5 * MINUTE)
        )

    def on_duplicate(self, ctx):
        if not ctx.fingerprint_matches:
            return Decision.standard(ctx)
        # The provider refuses the deposed holder's late request by its fence
        # and answers ours from its record if it already charged.
        if ctx.state is RecordState.IN_PROGRESS and ctx.lease_remaining_ms == 0:
            return Decision.re_execute()
        if ctx.state is RecordState.OUTCOME_UNKNOWN:
            return Decision.re_execute()
        return Decision.standard(ctx)


Policy = export(ProviderCharge)
