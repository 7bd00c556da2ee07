"""`billing-charge`, ported from guest/policies/billing-charge: one charge per
(tenant, customer, billing period, invoice), however often the nightly job
runs. Derives the Rust policy's parts in the Rust policy's order, so the keys
and fingerprints are identical.

- key: tenant, customer, billing_period, invoice_id (the tenant scopes the
  others: two tenants' `c1` are different customers);
- fingerprint: amount and currency (another amount is refused with 422);
- partition: the customer; retention 400 days, lease 5 minutes;
- duplicates: Decision.standard.
"""

from idem_policy import DAY, MINUTE, Decision, Derivation, Policy, PolicyError, PolicyInfo, export

_MONTHS = frozenset(f"{m:02d}" for m in range(1, 13))
_DIGITS = frozenset("0123456789")
_UPPER = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZ")


def is_year_month(s: str) -> bool:
    # ASCII only, as Rust's byte checks: str.isdigit() would take "٢٠٢٦".
    return (
        len(s) == 7
        and s[4] == "-"
        and all(c in _DIGITS for c in s[:4] + s[5:])
        and s[5:] in _MONTHS
    )


class BillingCharge(Policy):
    def describe(self):
        return PolicyInfo(
            "billing-charge",
            "1.0.0",
            "billing",
            "One charge per customer, billing period and invoice",
        )

    def derive(self, op):
        if op.kind != "charge":
            raise PolicyError.unsupported_kind(op.kind)
        customer = op.text("customer")
        period = op.text("billing_period")
        if not is_year_month(period):
            raise PolicyError.invalid("billing_period", "must be a month like 2026-11")
        currency = op.text("currency")
        # 3 ASCII upper-case letters (a 3-character check is a 3-byte one here).
        if not (len(currency) == 3 and all(c in _UPPER for c in currency)):
            raise PolicyError.invalid("currency", "must be an ISO 4217 code like EUR")
        return (
            Derivation(customer)
            .key("tenant", op.tenant)
            .key("customer", customer)
            .key("billing_period", period)
            .key("invoice_id", op.text("invoice_id"))
            .fingerprint("amount", op.material("amount"))
            .fingerprint("currency", currency)
            .retention_s(400 * DAY)
            .lease_s(5 * MINUTE)
        )

    def on_duplicate(self, ctx):
        return Decision.standard(ctx)


Policy = export(BillingCharge)
