"""What a duplicate gets: the context the host hands ``on_duplicate``, the
decisions, and :meth:`Decision.standard`, the Rust SDK's default table.
"""

from dataclasses import dataclass
from enum import Enum
from typing import Literal, Optional

from .operation import Operation


class RecordState(Enum):
    """The state of the stored record a duplicate collided with."""

    IN_PROGRESS = "in-progress"
    COMPLETED = "completed"
    FAILED_RETRYABLE = "failed-retryable"
    FAILED_PERMANENT = "failed-permanent"
    OUTCOME_UNKNOWN = "outcome-unknown"


@dataclass(frozen=True)
class OutcomeSummary:
    """The stored outcome's status (exit code or HTTP status), size in bytes
    and, for a failed attempt, its truncated error message."""

    status: int
    size: int = 0
    error: Optional[str] = None


@dataclass(frozen=True)
class DuplicateContext:
    """What the host knows about a duplicate. ``lease_remaining_ms`` is 0 when
    the lease has expired or the record is not in progress."""

    operation: Operation
    state: RecordState
    fingerprint_matches: bool
    attempts: int
    age_ms: int
    lease_remaining_ms: int
    outcome: Optional[OutcomeSummary] = None


@dataclass(frozen=True)
class Rejection:
    """A refusal: HTTP-style ``status`` (409 in progress, 422 mismatch, ...),
    a ``reason`` and, when trying again may help, ``retry_after_ms``."""

    status: int
    reason: str
    retry_after_ms: Optional[int] = None


DecisionName = Literal["replay", "reject", "wait", "re-execute", "mark-unknown"]
"""The contract's names of the five decisions, as :attr:`Decision.name` spells them."""


@dataclass(frozen=True)
class Decision:
    """One of the contract's five decisions. ``name`` is its contract spelling
    (``replay``, ``reject``, ``wait``, ``re-execute``, ``mark-unknown``);
    ``rejection`` is set for ``reject`` and ``mark-unknown``, ``wait_ms`` for
    ``wait``. Build one with the class methods, not the constructor."""

    name: DecisionName
    rejection: Optional[Rejection] = None
    wait_ms: Optional[int] = None

    @classmethod
    def replay(cls) -> "Decision":
        """Hand back the stored outcome (completed or permanently failed
        record, matching fingerprint)."""
        return cls("replay")

    @classmethod
    def reject(cls, status: int, reason: str, retry_after_ms: Optional[int] = None) -> "Decision":
        """Refuse this duplicate."""
        return cls("reject", rejection=Rejection(status, reason, retry_after_ms))

    @classmethod
    def wait(cls, max_ms: int) -> "Decision":
        """Wait up to ``max_ms`` in all for an in-progress record, then
        decide again (a wait decided again gets what is left of the first
        one's bound); the host may cap it (``--max-wait``), never extend it."""
        return cls("wait", wait_ms=max_ms)

    @classmethod
    def re_execute(cls) -> "Decision":
        """Run the effect again under the same key (retryable failure, expired
        lease or unknown outcome, matching fingerprint)."""
        return cls("re-execute")

    @classmethod
    def mark_unknown(cls, status: int, reason: str, retry_after_ms: Optional[int] = None) -> "Decision":
        """Mark an expired in-progress record outcome-unknown and refuse."""
        return cls("mark-unknown", rejection=Rejection(status, reason, retry_after_ms))

    @classmethod
    def standard(cls, ctx: DuplicateContext) -> "Decision":
        """The decisions most policies want (the Rust SDK's, word for word):

        - a different fingerprint → reject 422 (the key was reused);
        - completed or permanently failed → replay;
        - in progress with a live lease → reject 409, retry after the lease;
        - in progress with an expired lease → mark outcome-unknown for review
          (the effect may have happened: never run it blind);
        - failed-retryable → re-execute;
        - outcome-unknown → reject 409 for review.
        """
        if not ctx.fingerprint_matches:
            return cls.reject(422, "the idempotency key was reused for a different request")
        state = ctx.state
        if state in (RecordState.COMPLETED, RecordState.FAILED_PERMANENT):
            return cls.replay()
        if state is RecordState.IN_PROGRESS and ctx.lease_remaining_ms > 0:
            return cls.reject(
                409, "the operation is in progress", retry_after_ms=ctx.lease_remaining_ms
            )
        if state is RecordState.IN_PROGRESS:
            return cls.mark_unknown(
                409,
                "the previous holder's lease expired before it finished; the outcome needs review",
            )
        if state is RecordState.FAILED_RETRYABLE:
            return cls.re_execute()
        if state is RecordState.OUTCOME_UNKNOWN:
            return cls.reject(409, "the outcome of an earlier attempt is unknown and needs review")
        # Rust's match is exhaustive; here an unknown state is a bug: trap.
        raise ValueError(f"unknown record state {state!r}")
