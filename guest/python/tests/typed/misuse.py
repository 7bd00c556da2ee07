"""Wrong uses the annotations must refuse. Each line carries the error mypy
must report (``# type: ignore[code]``); ``mypy --strict`` warns about an
ignore that silences nothing, so a line that type-checks fails the check:
an annotation loosened to ``Any`` would let these through unnoticed."""

from idem_policy import Decision, Derivation, DuplicateContext, Operation, PolicyError, RecordState
from idem_policy import canonical_decimal


def misuses(op: Operation, ctx: DuplicateContext) -> list[object]:
    return [
        op.txt("customer"),  # type: ignore[attr-defined]  # a typo of `text`
        op.decimal(1),  # type: ignore[arg-type]  # accessors take a field name
        RecordState.COMPLETE,  # type: ignore[attr-defined]  # a state misspelt
        ctx.fingerprintMatches,  # type: ignore[attr-defined]  # the JavaScript spelling
        ctx.state == "completed",  # type: ignore[comparison-overlap]  # a state is an enum, not its text
        Decision.wait("2s"),  # type: ignore[arg-type]  # a wait is ms
        Decision.reject(409),  # type: ignore[call-arg]  # a rejection needs a reason
        Decision.retry(),  # type: ignore[attr-defined]  # the decision is `re_execute`
        Decision("retry"),  # type: ignore[arg-type]  # not one of the contract's names
        Derivation("c1").key("amount", 10.5),  # type: ignore[arg-type]  # material is text
        Derivation("c1").retention(30),  # type: ignore[attr-defined]  # it is `retention_s`
        PolicyError("not-found", None, "no such refund"),  # type: ignore[arg-type]  # an ErrorCode
        canonical_decimal(10.5),  # type: ignore[arg-type]  # text, never a float
        op.now_ms + "1",  # type: ignore[operator]  # now_ms is an int
    ]
