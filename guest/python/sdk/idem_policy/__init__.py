"""idem-policy for Python: write an idempotency policy for idem.

A policy tells the idem host, for every operation, what identifies its effect
(key material), what must match for a duplicate to be a true replay
(fingerprint material), who owns it (partition), how long to remember it and
how long a claim holds, and, for every duplicate, what the duplicate gets.
The host, never the policy, hashes the material into keys.

::

    from idem_policy import DAY, MINUTE, Decision, Derivation, Policy, PolicyInfo, export

    class Charges(Policy):
        def describe(self):
            return PolicyInfo("charges", "1.0.0", "billing", "One charge per invoice")

        def derive(self, op):
            customer = op.text("customer")
            return (Derivation(customer)
                    .key("customer", customer)
                    .key("invoice_id", op.text("invoice_id"))
                    .fingerprint("amount", op.material("amount"))
                    .retention_s(400 * DAY)
                    .lease_s(5 * MINUTE))

        def on_duplicate(self, ctx):
            return Decision.standard(ctx)

    Policy = export(Charges)

Test it natively with ``python -m idem_policy.cases app.py cases.json``;
build it with componentize-py (see guest/python/README.md). Standard library
only, Python 3.11.
"""

from .decimal import MAX_DECIMAL_LEN, DecimalError, canonical_decimal
from .decision import Decision, DecisionName, DuplicateContext, OutcomeSummary, RecordState, Rejection
from .derivation import DAY, HOUR, MINUTE, Derivation, Part, PolicyInfo
from .errors import ErrorCode, PolicyError
from .export import export
from .operation import Boolean, Field, Number, Operation, RunContext, Text, Trigger, Value
from .policy import Policy

__all__ = [
    "DAY",
    "HOUR",
    "MINUTE",
    "MAX_DECIMAL_LEN",
    "Boolean",
    "Decision",
    "DecimalError",
    "DecisionName",
    "Derivation",
    "DuplicateContext",
    "ErrorCode",
    "Field",
    "Number",
    "Operation",
    "OutcomeSummary",
    "Part",
    "Policy",
    "PolicyError",
    "PolicyInfo",
    "RecordState",
    "Rejection",
    "RunContext",
    "Text",
    "Trigger",
    "Value",
    "canonical_decimal",
    "export",
]
