"""What `idem serve` answers, as typed values (docs/reference/serve-api.md).

Members this release does not know are kept in `raw`, never refused, so a
newer server's answers still read.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Mapping, Optional, TypedDict, Union


class _OperationRequired(TypedDict):
    kind: str
    tenant: str


class Run(TypedDict, total=False):
    """Which run asked: `run_id`, `trigger`, `attempt` (from 1)."""

    run_id: str
    trigger: Literal["scheduled", "retry", "manual", "client"]
    attempt: int


class Operation(_OperationRequired, total=False):
    """An operation as `idem key` reads it (docs/reference/operation.md)."""

    fields: dict[str, Union[str, int, float, bool]]
    run: Run
    now_ms: int


@dataclass(frozen=True)
class Derivation:
    """`/v1/derive`: the key, without touching the store."""

    namespace: str
    key: str
    fingerprint: str
    partition: str
    lease_ms: int
    retention_s: int
    policy: str
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def parse(cls, doc: Mapping[str, Any]) -> Derivation:
        return cls(
            namespace=doc["namespace"],
            key=doc["key"],
            fingerprint=doc["fingerprint"],
            partition=doc["partition"],
            lease_ms=doc["lease_ms"],
            retention_s=doc["retention_s"],
            policy=doc["policy"],
            raw=dict(doc),
        )


@dataclass(frozen=True)
class Outcome:
    """A stored outcome: `status`, `error` (a failure's), and the body as
    text (`body`) when it is UTF-8, else as base64 (`body_base64`)."""

    status: int
    error: Optional[str]
    body: Optional[str] = None
    body_base64: Optional[str] = None

    @classmethod
    def parse(cls, doc: Mapping[str, Any]) -> Outcome:
        return cls(
            status=doc["status"],
            error=doc.get("error"),
            body=doc.get("body"),
            body_base64=doc.get("body_base64"),
        )

    def bytes(self) -> bytes:
        """The stored body's bytes (empty when none was stored)."""
        if self.body_base64 is not None:
            return base64.b64decode(self.body_base64)
        return (self.body or "").encode("utf-8")


@dataclass(frozen=True)
class ExecuteAnswer:
    """You hold the key: perform the effect (handing `key` and `fence`
    downstream), then complete or fail under `fence`; heartbeat within
    `lease_ms` while it runs."""

    answer: ClassVar[str] = "execute"
    namespace: str
    key: str
    fence: int
    attempt: int
    take_over: bool
    partition: str
    lease_ms: int
    lease_until_ms: int
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)


@dataclass(frozen=True)
class ReplayAnswer:
    """The effect already happened (or failed for good): what was stored."""

    answer: ClassVar[str] = "replay"
    key: str
    state: Literal["completed", "failed-permanent"]
    fence: int
    outcome: Outcome
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)


@dataclass(frozen=True)
class InProgressAnswer:
    """Another holder is performing the effect: try again later."""

    answer: ClassVar[str] = "in-progress"
    key: str
    #: When to try again: the policy's hint when shorter than the holder's
    #: lease left, else a second; never past the lease.
    retry_after_ms: Optional[int]
    #: What is left of the holder's lease (by the store's clock): by then it
    #: has ended, or the next begin is the policy's to decide.
    lease_remaining_ms: Optional[int]
    reason: str
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)


@dataclass(frozen=True)
class ConflictAnswer:
    """The key was used for a different operation."""

    answer: ClassVar[str] = "conflict"
    key: str
    status: int
    reason: str
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)


@dataclass(frozen=True)
class RejectedAnswer:
    """The policy rejected the duplicate (`sent_to_review`: a lapsed claim
    now waits for a person)."""

    answer: ClassVar[str] = "rejected"
    key: str
    status: int
    reason: str
    retry_after_ms: Optional[int]
    sent_to_review: bool
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)


BeginAnswer = Union[ExecuteAnswer, ReplayAnswer, InProgressAnswer, ConflictAnswer, RejectedAnswer]


def parse_begin(doc: Mapping[str, Any]) -> BeginAnswer:
    """The begin answer `doc` is, by its `answer` member."""
    raw = dict(doc)
    answer = doc.get("answer")
    if answer == "execute":
        return ExecuteAnswer(
            namespace=doc["namespace"],
            key=doc["key"],
            fence=doc["fence"],
            attempt=doc["attempt"],
            take_over=doc["take_over"],
            partition=doc["partition"],
            lease_ms=doc["lease_ms"],
            lease_until_ms=doc["lease_until_ms"],
            raw=raw,
        )
    if answer == "replay":
        return ReplayAnswer(
            key=doc["key"],
            state=doc["state"],
            fence=doc["fence"],
            outcome=Outcome.parse(doc["outcome"]),
            raw=raw,
        )
    if answer == "in-progress":
        return InProgressAnswer(
            key=doc["key"],
            retry_after_ms=doc.get("retry_after_ms"),
            lease_remaining_ms=doc.get("lease_remaining_ms"),
            reason=doc["reason"],
            raw=raw,
        )
    if answer == "conflict":
        return ConflictAnswer(key=doc["key"], status=doc["status"], reason=doc["reason"], raw=raw)
    if answer == "rejected":
        return RejectedAnswer(
            key=doc["key"],
            status=doc["status"],
            reason=doc["reason"],
            retry_after_ms=doc.get("retry_after_ms"),
            sent_to_review=doc["sent_to_review"],
            raw=raw,
        )
    raise ValueError(f"not a begin answer: {doc!r}")


@dataclass(frozen=True)
class Finished:
    """`/v1/complete` and `/v1/fail`: the record's state under the fence."""

    key: str
    fence: int
    state: Literal["completed", "failed-retryable", "failed-permanent"]

    @classmethod
    def parse(cls, doc: Mapping[str, Any]) -> Finished:
        return cls(key=doc["key"], fence=doc["fence"], state=doc["state"])


@dataclass(frozen=True)
class Heartbeat:
    """`/v1/heartbeat`: the lease now ends at `lease_until_ms` (store clock)."""

    key: str
    fence: int
    lease_until_ms: int

    @classmethod
    def parse(cls, doc: Mapping[str, Any]) -> Heartbeat:
        return cls(key=doc["key"], fence=doc["fence"], lease_until_ms=doc["lease_until_ms"])


@dataclass(frozen=True)
class Resolved:
    """`/v1/resolve`: the record as a person settled it, under a new fence."""

    key: str
    state: Literal["completed", "failed-retryable", "failed-permanent"]
    fence: int
    by: str
    reason: str
    operation: dict[str, Any]
    amended: bool = False
    """Whether this amended a person's earlier release or rejection."""

    @classmethod
    def parse(cls, doc: Mapping[str, Any]) -> Resolved:
        return cls(
            key=doc["key"],
            state=doc["state"],
            fence=doc["fence"],
            by=doc["by"],
            reason=doc["reason"],
            operation=dict(doc["operation"]),
            amended=bool(doc.get("amended", False)),
        )
