"""`{{name}}`: one charge per (tenant, customer, invoice), however often the
job that sends it runs.

- key: tenant, customer, invoice_id (the tenant scopes the others: two
  tenants' `c1` are different customers);
- fingerprint: amount (as a canonical decimal: "10.50", "10.5" and 10.5 are
  one amount) and currency; the same invoice with another amount is not a
  replay, it is refused with 422;
- partition: the customer;
- retention: 400 days, lease: 5 minutes;
- duplicates: Decision.standard (completed → replay, in progress → 409 with
  retry-after, lease expired → outcome-unknown for review, failed-retryable
  → re-execute).

Keep it pure: inside the component time.time() and open() trap, and
random.random() and hash() of a string are fixed at build time (different
in every build); the operation's time is op.now_ms. Test natively with
`python3 -m idem_policy.cases . cases.json`; build with `idem build`.
"""

from idem_policy import DAY, MINUTE, Decision, Derivation, Policy, PolicyError, PolicyInfo, export

_UPPER = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZ")


class {{Type}}(Policy):
    def describe(self):
        return PolicyInfo(
            "{{name}}",
            "0.1.0",
            "{{name}}",
            "One charge per tenant, customer and invoice",
        )

    def derive(self, op):
        if op.kind != "charge":
            raise PolicyError.unsupported_kind(op.kind)
        customer = op.text("customer")
        amount = op.decimal("amount")
        if amount.startswith("-") or amount == "0":
            raise PolicyError.invalid("amount", "must be more than 0")
        currency = op.text("currency")
        if not (len(currency) == 3 and all(c in _UPPER for c in currency)):
            raise PolicyError.invalid("currency", "must be an ISO 4217 code like EUR")
        return (
            Derivation(customer)
            .key("tenant", op.tenant)
            .key("customer", customer)
            .key("invoice_id", op.text("invoice_id"))
            .fingerprint("amount", amount)
            .fingerprint("currency", currency)
            .retention_s(400 * DAY)
            .lease_s(5 * MINUTE)
        )

    def on_duplicate(self, ctx):
        return Decision.standard(ctx)


Policy = export({{Type}})
