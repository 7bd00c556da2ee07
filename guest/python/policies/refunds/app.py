"""A refund policy with complete annotations, as an author writes one against
``idem_policy`` (the scenario of guest/js/sdk/typecheck/refund-policy.ts and
guest/policies/refunds, and the same cases file,
guest/testdata/refund-cases.json): the key from the
customer, the charge and the refund; the amount and currency as the
fingerprint; a duplicate waits while the refund is in progress, is run again
after a retryable failure, goes to review after an expired claim; a missing id
or a negative amount is refused. ``mypy --strict`` must accept it."""

import re
from typing import assert_never

from idem_policy import (
    DAY,
    MINUTE,
    Decision,
    Derivation,
    DuplicateContext,
    Operation,
    PolicyError,
    PolicyInfo,
    RecordState,
    export,
)

# The module's `Policy` must be the export (componentize-py binds that name),
# so the base class is imported under another: mypy refuses a class name
# rebound to a value.
from idem_policy import Policy as BasePolicy

_CURRENCY = re.compile(r"[A-Z]{3}")


class Refunds(BasePolicy):
    def describe(self) -> PolicyInfo:
        return PolicyInfo("refunds", "1.0.0", "refunds", "One refund per charge and refund id")

    def derive(self, op: Operation) -> Derivation:
        if op.kind != "refund":
            raise PolicyError.unsupported_kind(op.kind)
        customer = op.text("customer")
        amount = op.decimal("amount")
        if amount.startswith("-"):
            raise PolicyError.invalid("amount", "must not be negative")
        currency = op.text("currency")
        if not _CURRENCY.fullmatch(currency):
            raise PolicyError.invalid("currency", "must be an ISO 4217 code like EUR")
        return (
            Derivation(customer)
            .key("customer", customer)
            .key("charge_id", op.text("charge_id"))
            .key("refund_id", op.text("refund_id"))
            .fingerprint("amount", amount)
            .fingerprint("currency", currency)
            .retention_s(90 * DAY)
            .lease_s(2 * MINUTE)
        )

    def on_duplicate(self, ctx: DuplicateContext) -> Decision:
        if not ctx.fingerprint_matches:
            return Decision.standard(ctx)
        match ctx.state:
            case RecordState.IN_PROGRESS:
                # A live claim: wait for it (2 s a round); an expired one may
                # have refunded already, so a person decides.
                if ctx.lease_remaining_ms > 0:
                    return Decision.wait(2000)
                return Decision.mark_unknown(409, "the refund may have been made; it needs review")
            case RecordState.FAILED_RETRYABLE:
                return Decision.re_execute()
            case RecordState.COMPLETED | RecordState.FAILED_PERMANENT | RecordState.OUTCOME_UNKNOWN:
                return Decision.standard(ctx)
            case unknown:
                # Exhaustive: a new record state is a mypy error here.
                assert_never(unknown)


Policy = export(Refunds)
