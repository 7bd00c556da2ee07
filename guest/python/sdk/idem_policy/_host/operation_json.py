"""The operation JSON format and its canonical form, as the host reads it
(``idem-core/src/operation.rs``), for the native cases runner.

- every string (kind, tenant, field names, text values, run id) is NFC;
- fields are sorted by name, bytewise after NFC (code-point order is UTF-8
  byte order); a name repeated in the JSON, or two names equal after NFC, is
  refused;
- numbers are spelt canonically (:mod:`.number`);
- an unknown member anywhere is refused, never ignored.
"""

import unicodedata
from typing import Optional, Union

from ..operation import Boolean, Field, Number, Operation, RunContext, Text, Trigger, Value
from . import json_source as js
from .number import NumberError, canonical_number

MAX_BYTES = 64 * 1024
MAX_FIELDS = 256
MAX_NAME_BYTES = 256

_TRIGGERS = {t.value: t for t in Trigger}


class OpError(ValueError):
    """Why an operation was refused; ``str()`` reads like the host's OpError."""


def _invalid(what: str, why: str) -> OpError:
    return OpError(f"operation {what}: {why}")


def _shape(why: str) -> OpError:
    return OpError(f"operation is not valid: {why}")


def _nfc(s: str) -> str:
    return unicodedata.normalize("NFC", s)


def _check_name(what: str, value: str) -> str:
    value = _nfc(value)
    if value == "":
        raise _invalid(what, "must not be empty")
    size = len(value.encode("utf-8"))
    if size > MAX_NAME_BYTES:
        raise _invalid(what, f"is {size} bytes; the limit is {MAX_NAME_BYTES}")
    # Rust's char::is_control is exactly the general category Cc.
    if any(unicodedata.category(c) == "Cc" for c in value):
        raise _invalid(what, "must not contain control characters")
    return value


def _raw_fields(value: object) -> list[tuple[str, Union[str, js.RawNumber, bool]]]:
    if not isinstance(value, js.Pairs):
        raise _shape(
            f"invalid type: {js.kind_of(value)}, expected an object of fields whose "
            "values are strings, numbers or booleans"
        )
    seen: set[str] = set()
    out: list[tuple[str, Union[str, js.RawNumber, bool]]] = []
    for name, v in value:
        if name in seen:
            raise _shape(f"field `{name}` appears twice")
        seen.add(name)
        if isinstance(v, (str, js.RawNumber, bool)):
            out.append((name, v))
            continue
        # Pairs is a list too: ask for the object first.
        what = "null" if v is None else "an object" if isinstance(v, js.Pairs) else "an array"
        raise _shape(
            f"field `{name}` is {what}; field values must be strings, numbers or booleans"
        )
    return out


def _raw_run(value: object) -> tuple[str, Trigger, int]:
    try:
        m = js.members(value, ("run_id", "trigger", "attempt"), "struct RawRun")
        if "run_id" not in m:
            raise js.JsonError("missing field `run_id`")
        if "trigger" not in m:
            raise js.JsonError("missing field `trigger`")
        run_id = js.string(m["run_id"], "run.run_id")
        trigger_text = js.string(m["trigger"], "run.trigger")
        if trigger_text not in _TRIGGERS:
            raise js.JsonError(
                f"unknown variant `{trigger_text}`, expected one of "
                "`scheduled`, `retry`, `manual`, `client`"
            )
        attempt = js.unsigned(m["attempt"], 32, "run.attempt") if "attempt" in m else 1
    except js.JsonError as e:
        raise _shape(str(e)) from None
    return run_id, _TRIGGERS[trigger_text], attempt


def operation_from_value(value: object) -> tuple[Operation, Optional[int]]:
    """``(Operation, now_ms or None)`` from a parsed JSON value (a member of a
    cases file), or :class:`OpError`. The SDK's Operation needs a time; the
    caller decides what an absent ``now_ms`` means (the runner uses 0)."""
    size = js.compact_len(value)
    if size > MAX_BYTES:
        raise OpError(f"operation is {size} bytes; the limit is {MAX_BYTES} bytes")
    if not isinstance(value, js.Pairs):
        raise _invalid("document", "must be a JSON object")
    try:
        m = js.members(value, ("kind", "tenant", "fields", "run", "now_ms"), "struct RawOperation")
        for required in ("kind", "tenant"):
            if required not in m:
                raise js.JsonError(f"missing field `{required}`")
        kind = js.string(m["kind"], "kind")
        tenant = js.string(m["tenant"], "tenant")
        now = m.get("now_ms")
        now_ms: Optional[int] = None if now is None else js.unsigned(now, 64, "now_ms")
    except js.JsonError as e:
        raise _shape(str(e)) from None
    raw_fields = _raw_fields(m["fields"]) if "fields" in m else []
    raw_run = None if m.get("run") is None else _raw_run(m["run"])

    kind = _check_name("`kind`", kind)
    tenant = _check_name("`tenant`", tenant)
    if len(raw_fields) > MAX_FIELDS:
        raise _invalid("`fields`", f"has {len(raw_fields)} fields; the limit is {MAX_FIELDS}")
    fields: dict[str, Value] = {}
    for raw_name, raw in raw_fields:
        name = _check_name(f"field name `{raw_name}`", raw_name)
        v: Value
        if isinstance(raw, bool):
            v = Boolean(raw)
        elif isinstance(raw, js.RawNumber):
            try:
                v = Number(canonical_number(raw.text))
            except NumberError as e:
                raise _invalid(f"field `{name}`", str(e)) from None
        else:
            v = Text(_nfc(raw))
        if name in fields:
            raise _invalid(
                f"field `{name}`", "appears twice once names are normalised to Unicode NFC"
            )
        fields[name] = v
    run = None
    if raw_run is not None:
        run_id, trigger, attempt = raw_run
        if attempt == 0:
            raise _invalid("`run.attempt`", "starts at 1")
        run = RunContext(_check_name("`run.run_id`", run_id), trigger, attempt)
    # sorted() on str compares code points, which is UTF-8 byte order.
    ordered = tuple(Field(n, fields[n]) for n in sorted(fields))
    return Operation(kind, tenant, ordered, run, now_ms or 0), now_ms
