"""What the WIT types allow a policy to return, checked in Python.

Rust's types make a wrong-typed derivation impossible; Python's do not. A
``lease_s`` of ``-1`` or ``2**40``, a ``None`` partition or a string with a
lone surrogate cannot cross the component boundary: in the component that is
a trap. The export glue and the native cases runner both call these checks,
so "passes natively" and "traps in the host" cannot disagree on them.
"""

from typing import get_args

from .decision import Decision, DecisionName, Rejection
from .derivation import Derivation, Part, PolicyInfo
from .errors import ErrorCode, PolicyError

U16 = (1 << 16) - 1
U32 = (1 << 32) - 1
U64 = (1 << 64) - 1

DECISION_NAMES: tuple[DecisionName, ...] = get_args(DecisionName)


class ContractError(TypeError):
    """A value the contract's types cannot carry (a trap in the host)."""


def _string(what: str, value: object) -> str:
    if not isinstance(value, str):
        raise ContractError(f"{what} must be a str, got {type(value).__name__}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ContractError(f"{what} is not valid Unicode (a lone surrogate)") from None
    return value


def _unsigned(what: str, value: object, top: int) -> int:
    # bool is an int in Python; the contract has no such thing as a True lease.
    if not isinstance(value, int) or isinstance(value, bool):
        raise ContractError(f"{what} must be an int, got {type(value).__name__}")
    if not 0 <= value <= top:
        raise ContractError(f"{what} is {value}, outside 0..={top}")
    return value


def check_info(info: object) -> PolicyInfo:
    if not isinstance(info, PolicyInfo):
        raise ContractError(f"describe must return a PolicyInfo, got {type(info).__name__}")
    for name in ("name", "version", "namespace", "description"):
        _string(f"policy-info.{name}", getattr(info, name))
    return info


def _check_parts(what: str, parts: object) -> None:
    if not isinstance(parts, list):
        raise ContractError(f"{what} must be a list of Part")
    for i, part in enumerate(parts):
        if not isinstance(part, Part):
            raise ContractError(f"{what}[{i}] must be a Part, got {type(part).__name__}")
        _string(f"{what}[{i}].name", part.name)
        _string(f"{what}[{i}].value", part.value)


def check_derivation(d: object) -> Derivation:
    if not isinstance(d, Derivation):
        raise ContractError(f"derive must return a Derivation, got {type(d).__name__}")
    _check_parts("key", d.key_parts)
    _check_parts("fingerprint", d.fingerprint_parts)
    _string("partition", d.partition)
    _unsigned("retention_s", d.retention_seconds, U64)
    _unsigned("lease_s", d.lease_seconds, U32)
    return d


def check_error(e: PolicyError) -> PolicyError:
    if not isinstance(e.code, ErrorCode):
        raise ContractError(f"PolicyError.code must be an ErrorCode, got {e.code!r}")
    if e.field is not None:
        _string("PolicyError.field", e.field)
    _string("PolicyError.message", e.message)
    return e


def _check_rejection(r: object) -> None:
    if not isinstance(r, Rejection):
        raise ContractError(f"a rejection must be a Rejection, got {type(r).__name__}")
    _unsigned("rejection.status", r.status, U16)
    _string("rejection.reason", r.reason)
    if r.retry_after_ms is not None:
        _unsigned("rejection.retry_after_ms", r.retry_after_ms, U64)


def check_decision(d: object) -> Decision:
    if not isinstance(d, Decision):
        raise ContractError(f"on_duplicate must return a Decision, got {type(d).__name__}")
    if d.name not in DECISION_NAMES:
        raise ContractError(f"unknown decision {d.name!r}")
    if d.name in ("reject", "mark-unknown"):
        _check_rejection(d.rejection)
    if d.name == "wait":
        _unsigned("wait", d.wait_ms, U64)
    return d
