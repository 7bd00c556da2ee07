"""The cases-file format (``idem-core/src/cases.rs``), read as serde reads it:
every struct refuses unknown and repeated members, integers must be integer
literals in range, an ``Option`` member may be ``null``.

A case's ``op`` is kept as parsed JSON; :mod:`.operation_json` reads it as an
operation when the case runs, so a bad op fails that case alone.
"""

from dataclasses import dataclass
from typing import Callable, Optional, TypeVar, Union

from ..decision import OutcomeSummary, RecordState
from . import json_source as js

_STATES = {s.value: s for s in RecordState}

_EXPECT_STRINGS = (
    "key",
    "fingerprint",
    "partition",
    "same_key_as",
    "key_differs_from",
    "same_fingerprint_as",
    "fingerprint_differs_from",
    "error",
    "field",
    "decision",
)
_EXPECT_INTS = {"retention_s": 64, "lease_s": 32, "status": 16, "retry_after_ms": 64, "wait_ms": 64}
_EXPECT_BOOLS = ("malformed", "unsafe")


T = TypeVar("T")

# A case's `expect`: each member present is a check (ints are u16 to u64).
Expect = dict[str, Union[str, int, bool]]


class CasesFileError(ValueError):
    """Not a cases file (the Rust runner panics on one; ours exits 2)."""


@dataclass
class DuplicateSpec:
    state: RecordState
    fingerprint_matches: bool = True
    attempts: int = 1
    age_ms: int = 0
    lease_remaining_ms: int = 0
    outcome: Optional[OutcomeSummary] = None


@dataclass
class Case:
    name: str
    op: object
    expect: Expect
    duplicate: Optional[DuplicateSpec] = None


@dataclass
class CasesFile:
    cases: list[Case]
    policy: Optional[str] = None


# Every member of `expect` that makes a case able to fail (`field`, `status`,
# `retry_after_ms` and `wait_ms` only refine another check, as in Rust).
CHECKS = (
    "key",
    "fingerprint",
    "partition",
    "retention_s",
    "lease_s",
    "same_key_as",
    "key_differs_from",
    "same_fingerprint_as",
    "fingerprint_differs_from",
    "error",
    "malformed",
    "decision",
    "unsafe",
)


def _optional(m: dict[str, object], name: str, read: Callable[[object], T]) -> Optional[T]:
    v = m.get(name)
    return None if v is None else read(v)


def _expect(value: object) -> Expect:
    allowed = _EXPECT_STRINGS + tuple(_EXPECT_INTS) + _EXPECT_BOOLS
    m = js.members(value, allowed, "struct Expect")
    out: Expect = {}
    for name, v in m.items():
        if v is None:
            continue
        if name in _EXPECT_STRINGS:
            out[name] = js.string(v, f"expect.{name}")
        elif name in _EXPECT_INTS:
            out[name] = js.unsigned(v, _EXPECT_INTS[name], f"expect.{name}")
        else:
            out[name] = js.boolean(v, f"expect.{name}")
    return out


def _outcome(value: object) -> OutcomeSummary:
    m = js.members(value, ("status", "size", "error"), "struct OutcomeSummary")
    if "status" not in m:
        raise js.JsonError("missing field `status`")
    return OutcomeSummary(
        status=js.signed32(m["status"], "outcome.status"),
        size=js.unsigned(m["size"], 64, "outcome.size") if "size" in m else 0,
        error=_optional(m, "error", lambda v: js.string(v, "outcome.error")),
    )


def _duplicate(value: object) -> DuplicateSpec:
    names = ("state", "fingerprint_matches", "attempts", "age_ms", "lease_remaining_ms", "outcome")
    m = js.members(value, names, "struct DuplicateSpec")
    if "state" not in m:
        raise js.JsonError("missing field `state`")
    state = js.string(m["state"], "duplicate.state")
    if state not in _STATES:
        raise js.JsonError(
            f"unknown variant `{state}`, expected one of "
            + ", ".join(f"`{s}`" for s in _STATES)
        )
    spec = DuplicateSpec(_STATES[state])
    if "fingerprint_matches" in m:
        spec.fingerprint_matches = js.boolean(m["fingerprint_matches"], "fingerprint_matches")
    if "attempts" in m:
        spec.attempts = js.unsigned(m["attempts"], 32, "attempts")
    if "age_ms" in m:
        spec.age_ms = js.unsigned(m["age_ms"], 64, "age_ms")
    if "lease_remaining_ms" in m:
        spec.lease_remaining_ms = js.unsigned(m["lease_remaining_ms"], 64, "lease_remaining_ms")
    spec.outcome = _optional(m, "outcome", _outcome)
    return spec


def _case(value: object, index: int) -> Case:
    m = js.members(value, ("name", "op", "duplicate", "expect"), f"struct Case (case {index})")
    for required in ("name", "op", "expect"):
        if required not in m:
            raise js.JsonError(f"missing field `{required}` (case {index})")
    return Case(
        name=js.string(m["name"], "name"),
        op=m["op"],
        expect=_expect(m["expect"]),
        duplicate=_optional(m, "duplicate", _duplicate),
    )


def parse(text: str) -> CasesFile:
    """Reads a cases file from JSON text; raises :class:`CasesFileError`."""
    try:
        m = js.members(js.loads(text), ("policy", "cases"), "struct CasesFile")
        if "cases" not in m:
            raise js.JsonError("missing field `cases`")
        cases = m["cases"]
        if not isinstance(cases, list) or isinstance(cases, js.Pairs):
            raise js.JsonError(f"invalid type: {js.kind_of(cases)}, expected a sequence")
        return CasesFile(
            cases=[_case(c, i) for i, c in enumerate(cases)],
            policy=_optional(m, "policy", lambda v: js.string(v, "policy")),
        )
    except js.JsonError as e:
        raise CasesFileError(str(e)) from None
