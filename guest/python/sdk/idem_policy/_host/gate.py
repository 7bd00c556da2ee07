"""The host's safety gate for decisions (``idem-core/src/duplicate.rs``,
``check_decision``): an unsafe decision is refused and the duplicate rejected.
"""

from typing import Optional

from ..decision import Decision, DuplicateContext, RecordState, Rejection

MAX_WAIT_MS = 60_000
MAX_REASON_BYTES = 1024


class UnsafeDecision(ValueError):
    def __init__(self, decision: str, state: RecordState, fingerprint_matches: bool, why: str) -> None:
        mismatch = "" if fingerprint_matches else " with a different fingerprint"
        super().__init__(f"policy decided `{decision}` for a {state.value} record{mismatch}: {why}")


def check_decision(ctx: DuplicateContext, decision: Decision) -> None:
    """Raises :class:`UnsafeDecision` when the host would refuse ``decision``."""
    state = ctx.state
    expired = state is RecordState.IN_PROGRESS and ctx.lease_remaining_ms == 0
    final = state in (RecordState.COMPLETED, RecordState.FAILED_PERMANENT)

    def refuse(why: str) -> UnsafeDecision:
        return UnsafeDecision(decision.name, state, ctx.fingerprint_matches, why)

    def check_rejection(r: Optional[Rejection]) -> None:
        # contract.check_decision has made sure there is one.
        assert r is not None
        if not 400 <= r.status <= 599:
            raise refuse("a rejection's status must be 400 to 599")
        if not 1 <= len(r.reason.encode()) <= MAX_REASON_BYTES:
            raise refuse("a rejection needs a reason of 1 to 1024 bytes")

    name = decision.name
    if name == "replay":
        if not final:
            raise refuse("there is no final outcome to replay")
        if not ctx.fingerprint_matches:
            raise refuse("the stored outcome belongs to a different request")
    elif name == "re-execute":
        if final:
            raise refuse("a final record is never executed again")
        if state is RecordState.IN_PROGRESS and not expired:
            raise refuse("another holder's lease is still live")
        if not ctx.fingerprint_matches:
            raise refuse("re-executing would run a different request under the same key")
    elif name == "wait":
        if state is not RecordState.IN_PROGRESS or expired:
            raise refuse("waiting only makes sense for a live in-progress record")
        if decision.wait_ms is None or not 1 <= decision.wait_ms <= MAX_WAIT_MS:
            raise refuse("a wait must be 1 to 60000 ms")
    elif name == "mark-unknown":
        if not expired:
            raise refuse(
                "only an in-progress record whose lease expired can be marked outcome-unknown"
            )
        check_rejection(decision.rejection)
    else:
        check_rejection(decision.rejection)
