"""The errors the client raises.

Every error `idem serve` answers is an RFC 9457 problem document whose `type`
ends in a slug naming the case; each problem becomes the exception class
named for its slug (or, for a slug this release does not know, for its HTTP
status), carrying the document. The begin answers that are not errors of the
API but stop a call (`in-progress` past the wait, `conflict`, `rejected`, a
replayed permanent failure) are exceptions of their own, raised by the
helpers (`IdemClient.idempotent`, `idempotent`), never by `IdemClient.begin`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Optional

if TYPE_CHECKING:
    from .answers import ConflictAnswer, InProgressAnswer, RejectedAnswer, ReplayAnswer

PROBLEM_PREFIX = "tag:idem.invalid,2026:problem/"


class IdemError(Exception):
    """Anything this client raises."""


class TransportError(IdemError):
    """The server could not be reached, or answered something that is not
    the API (not JSON, a cut connection, a timeout). Nothing is known about
    whether the request was applied: `complete` and `fail` may be sent again
    under the same fence (the same end is answered 200 again)."""


class ProblemError(IdemError):
    """The server refused the request with a problem document."""

    def __init__(self, problem: Mapping[str, Any], retry_after_s: Optional[int] = None) -> None:
        self.problem: dict[str, Any] = dict(problem)
        self.status: int = int(self.problem.get("status", 0))
        self.type: str = str(self.problem.get("type", ""))
        self.title: str = str(self.problem.get("title", ""))
        self.detail: str = str(self.problem.get("detail", ""))
        self.member: Optional[str] = self.problem.get("member")
        hinted = self.problem.get("retry_after_s", retry_after_s)
        self.retry_after_s: Optional[int] = int(hinted) if hinted is not None else None
        super().__init__(f"{self.status} {self.slug or self.title}: {self.detail}")

    @property
    def slug(self) -> str:
        """The case, e.g. `stale-fence` (empty when `type` is not idem's)."""
        if self.type.startswith(PROBLEM_PREFIX):
            return self.type[len(PROBLEM_PREFIX) :]
        return ""


class BadRequest(ProblemError):
    """400: malformed JSON, an unknown, missing or wrongly typed member
    (named by `member`)."""


class Unauthorized(ProblemError):
    """401: no bearer token, or not this server's."""


class PolicyNotRegistered(ProblemError):
    """403: the store registered this namespace, and not this policy's
    digest; nothing was written."""


class UnknownKey(ProblemError):
    """404: no record has the key (it never existed, or it expired)."""

    @property
    def key(self) -> Optional[str]:
        return self.problem.get("key")


class Conflict(ProblemError):
    """409: the write does not fit the record as it is now; nothing changed."""


class StaleFence(Conflict):
    """409 `stale-fence`: the fence is not the record's current one (someone
    took over, or a person resolved it)."""

    @property
    def fence(self) -> Optional[int]:
        return self.problem.get("fence")

    @property
    def current_fence(self) -> Optional[int]:
        return self.problem.get("current_fence")


class NotInProgress(Conflict):
    """409 `not-in-progress`: the record already ended (otherwise), or was
    sent to review."""

    @property
    def fence(self) -> Optional[int]:
        return self.problem.get("fence")

    @property
    def state(self) -> Optional[str]:
        return self.problem.get("state")


class NotWaitingForReview(Conflict):
    """409 `not-waiting-for-review`: a resolution of a record that does not
    wait for a person."""

    @property
    def state(self) -> Optional[str]:
        return self.problem.get("state")


class NotAmendable(Conflict):
    """409 `not-amendable`: an amendment of a record whose latest write is
    not a person's release or rejection (completed, a holder's end, still
    waiting for review)."""

    @property
    def state(self) -> Optional[str]:
        return self.problem.get("state")


class TooLarge(ProblemError):
    """413: the request, or the outcome's body, is past the limit
    (`limit_bytes`)."""

    @property
    def limit_bytes(self) -> Optional[int]:
        return self.problem.get("limit_bytes")


class PolicyRefused(ProblemError):
    """422: the policy refused the operation; `code` (`missing-field`,
    `invalid-value`, `unsupported-kind`) and `field` say why."""

    @property
    def code(self) -> Optional[str]:
        return self.problem.get("code")

    @property
    def field(self) -> Optional[str]:
        return self.problem.get("field")


class PolicyFailed(ProblemError):
    """500: the policy failed while evaluating (trap, fuel, memory)."""


class Unavailable(ProblemError):
    """503: the store failed, or the server has too many connections; try
    again after `retry_after_s`."""


_BY_SLUG: dict[str, type[ProblemError]] = {
    "malformed-json": BadRequest,
    "invalid-request": BadRequest,
    "unreadable-body": BadRequest,
    "malformed-request": BadRequest,
    "unauthorized": Unauthorized,
    "policy-not-registered": PolicyNotRegistered,
    "unknown-key": UnknownKey,
    "stale-fence": StaleFence,
    "not-in-progress": NotInProgress,
    "not-waiting-for-review": NotWaitingForReview,
    "not-amendable": NotAmendable,
    "body-too-large": TooLarge,
    "outcome-too-large": TooLarge,
    "refused-by-policy": PolicyRefused,
    "policy-failed": PolicyFailed,
    "store-unavailable": Unavailable,
    "too-many-connections": Unavailable,
}

_BY_STATUS: dict[int, type[ProblemError]] = {
    400: BadRequest,
    401: Unauthorized,
    409: Conflict,
    413: TooLarge,
    422: PolicyRefused,
    503: Unavailable,
}


def problem_error(problem: Mapping[str, Any], retry_after_s: Optional[int] = None) -> ProblemError:
    """The exception for a problem document: by its slug, else its status."""
    type_ = str(problem.get("type", ""))
    slug = type_[len(PROBLEM_PREFIX) :] if type_.startswith(PROBLEM_PREFIX) else ""
    cls = _BY_SLUG.get(slug) or _BY_STATUS.get(int(problem.get("status", 0))) or ProblemError
    return cls(problem, retry_after_s)


class InProgress(IdemError):
    """Another holder was still performing the effect when the wait ran out."""

    def __init__(self, answer: InProgressAnswer) -> None:
        self.answer = answer
        self.key = answer.key
        self.retry_after_ms = answer.retry_after_ms
        super().__init__(f"{answer.key}: in progress ({answer.reason})")


class OperationConflict(IdemError):
    """The key was used for a different operation (the fingerprint, e.g.
    the amount, does not match what was stored)."""

    def __init__(self, answer: ConflictAnswer) -> None:
        self.answer = answer
        self.key = answer.key
        super().__init__(f"{answer.key}: {answer.reason}")


class Rejected(IdemError):
    """The policy rejected the duplicate; `sent_to_review` when this call
    found a lapsed claim and the record now waits for a person."""

    def __init__(self, answer: RejectedAnswer) -> None:
        self.answer = answer
        self.key = answer.key
        self.sent_to_review = answer.sent_to_review
        super().__init__(f"{answer.key}: {answer.reason}")


class FailedPermanently(IdemError):
    """The record failed for good: its failure is replayed, the body is not
    run again. `answer.outcome` holds the stored status, error and body."""

    def __init__(self, answer: ReplayAnswer) -> None:
        self.answer = answer
        self.key = answer.key
        self.outcome = answer.outcome
        super().__init__(f"{answer.key}: failed permanently: {answer.outcome.error}")


class Permanent(Exception):
    """Raise this (or a subclass) from an idempotent body for a failure that
    must not be retried: the record is failed permanently, and every later
    call raises `FailedPermanently` instead of running the body."""
