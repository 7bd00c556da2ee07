"""JSON read the way the host reads it: numbers kept as their source text
(serde_json with ``arbitrary_precision``), objects kept as ordered pairs so
that a repeated name can be refused, and what serde_json refuses refused.

Python's ``json`` accepts ``NaN``/``Infinity`` and lone surrogate escapes
(``"\\ud800"``); serde_json refuses both, so this module does too.
"""

import json
from typing import NoReturn


class JsonError(ValueError):
    """Not JSON the host would read."""


class RawNumber:
    """A JSON number as written (``1.50e2`` stays ``1.50e2``)."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return f"RawNumber({self.text!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RawNumber) and other.text == self.text

    __hash__ = None  # type: ignore[assignment]  # unhashable, as a mutable value


class Pairs(list[tuple[str, object]]):
    """A JSON object as its (name, value) pairs in document order."""


def _constant(name: str) -> NoReturn:
    raise JsonError(f"`{name}` is not JSON")


def _check_strings(value: object, where: str = "document") -> None:
    # Surrogates can only come from \uD800-style escapes here (the text was
    # valid UTF-8); serde_json refuses a lone one, so must we.
    def bad(s: str) -> bool:
        return any("\ud800" <= c <= "\udfff" for c in s)

    if isinstance(value, str):
        if bad(value):
            raise JsonError(f"a string in {where} holds a lone surrogate escape")
    elif isinstance(value, Pairs):
        for name, v in value:
            if bad(name):
                raise JsonError(f"a member name in {where} holds a lone surrogate escape")
            _check_strings(v, where)
    elif isinstance(value, list):
        for v in value:
            _check_strings(v, where)


def loads(text: str) -> object:
    """Parses JSON text into str / RawNumber / bool / None / list / Pairs."""
    try:
        value = json.loads(
            text,
            object_pairs_hook=Pairs,
            parse_int=RawNumber,
            parse_float=RawNumber,
            parse_constant=_constant,
        )
    except json.JSONDecodeError as e:
        raise JsonError(f"{e.msg} at line {e.lineno} column {e.colno}") from None
    _check_strings(value)
    return value


def kind_of(value: object) -> str:
    """How serde names a JSON value in its "invalid type" errors."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"boolean `{'true' if value else 'false'}`"
    if isinstance(value, RawNumber):
        return f"number `{value.text}`" if not _is_integer(value.text) else f"integer `{value.text}`"
    if isinstance(value, str):
        return f"string {json.dumps(value, ensure_ascii=False)}"
    if isinstance(value, Pairs):
        return "map"
    return "sequence"


def _is_integer(text: str) -> bool:
    return text.lstrip("-").isdigit() and text.isascii()


def compact_len(value: object) -> int:
    """The UTF-8 length of ``value`` as serde_json writes it compactly (the
    size the host's 64 KiB operation limit measures)."""
    if isinstance(value, RawNumber):
        return len(value.text)
    if isinstance(value, Pairs):
        return 2 + sum(compact_len(n) + 1 + compact_len(v) for n, v in value) + max(len(value) - 1, 0)
    if isinstance(value, list):
        return 2 + sum(compact_len(v) for v in value) + max(len(value) - 1, 0)
    # serde_json and Python escape the same characters (", \, C0 controls;
    # \b \f \n \r \t short) and leave non-ASCII and DEL as they are.
    return len(json.dumps(value, ensure_ascii=False).encode("utf-8"))


def unsigned(value: object, bits: int, what: str) -> int:
    """An integer member of a serde struct: only an integer literal in range
    (``5.0``, ``1e3``, ``-0`` and ``true`` are refused, as by serde)."""
    top = (1 << bits) - 1
    if isinstance(value, RawNumber) and value.text.isascii() and value.text.isdigit():
        n = int(value.text) if len(value.text) <= 30 else top + 1
        if n <= top:
            return n
        raise JsonError(f"invalid value: integer `{value.text}`, expected u{bits} ({what})")
    raise JsonError(f"invalid type: {kind_of(value)}, expected u{bits} ({what})")


def signed32(value: object, what: str) -> int:
    """An ``i32`` member (serde reads ``-0`` as a float, so refuses it)."""
    if isinstance(value, RawNumber) and _is_integer(value.text) and value.text != "-0":
        digits = value.text.lstrip("-")
        n = int(value.text) if len(digits) <= 30 else 1 << 40
        if -(1 << 31) <= n < (1 << 31):
            return n
        raise JsonError(f"invalid value: integer `{value.text}`, expected i32 ({what})")
    raise JsonError(f"invalid type: {kind_of(value)}, expected i32 ({what})")


def string(value: object, what: str) -> str:
    if isinstance(value, str):
        return value
    raise JsonError(f"invalid type: {kind_of(value)}, expected a string ({what})")


def boolean(value: object, what: str) -> bool:
    if isinstance(value, bool):
        return value
    raise JsonError(f"invalid type: {kind_of(value)}, expected a boolean ({what})")


def members(value: object, allowed: tuple[str, ...], what: str) -> dict[str, object]:
    """A serde ``deny_unknown_fields`` struct: an object whose names are all
    in ``allowed``, none repeated."""
    if not isinstance(value, Pairs):
        raise JsonError(f"invalid type: {kind_of(value)}, expected {what}")
    out: dict[str, object] = {}
    for name, v in value:
        if name not in allowed:
            expected = ", ".join(f"`{a}`" for a in allowed)
            raise JsonError(f"unknown field `{name}`, expected one of {expected} ({what})")
        if name in out:
            raise JsonError(f"duplicate field `{name}` ({what})")
        out[name] = v
    return out
