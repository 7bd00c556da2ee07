"""The host's canonical spelling of JSON numbers (``idem-core/src/number.rs``),
replicated for the native cases runner.

``100``, ``100.0``, ``1e2`` and ``1.00E+2`` are one number and arrive as
``100``: no exponent, no leading zeros, no trailing fractional zeros, zero is
``0``. The number is read as its exact text, never as a float.
"""

MAX_CANONICAL_NUMBER_LEN = 128

_DIGITS = frozenset("0123456789")
_I64_MAX = (1 << 63) - 1


class NumberError(ValueError):
    """``kind`` is ``syntax`` or ``out-of-range``; ``str()`` is the host's message."""

    def __init__(self, kind: str, text: str):
        self.kind = kind
        self.text = text
        if kind == "syntax":
            message = f"`{text}` is not a JSON number"
        else:
            message = (
                f"`{text}` spells to more than {MAX_CANONICAL_NUMBER_LEN} digits; "
                "send it as a string"
            )
        super().__init__(message)


def _all_digits(s: str) -> bool:
    return all(c in _DIGITS for c in s)


def _parse_exponent(digits: str) -> int:
    # Rust parses into i64 and, when that overflows, uses i64::MAX / 4: an
    # exponent that long can only give zero or an out-of-range number. The
    # guard also keeps int() clear of Python's 4300-digit conversion limit.
    significant = digits.lstrip("0") or "0"
    if len(significant) > 19 or int(significant) > _I64_MAX:
        return _I64_MAX // 4
    return int(significant)


def canonical_number(text: str) -> str:
    """Canonicalises the text of a JSON number (RFC 8259 grammar)."""
    negative = text.startswith("-")
    rest = text[1:] if negative else text
    cut = min((i for i in (rest.find("e"), rest.find("E")) if i >= 0), default=-1)
    mantissa, exponent = (rest, None) if cut < 0 else (rest[:cut], rest[cut + 1 :])
    int_part, point, frac_part = mantissa.partition(".")
    if (
        int_part == ""
        or not _all_digits(int_part)
        or (len(int_part) > 1 and int_part.startswith("0"))
        or (point and frac_part == "")
        or not _all_digits(frac_part)
    ):
        raise NumberError("syntax", text)
    exp = 0
    if exponent is not None:
        digits = exponent[1:] if exponent[:1] in ("+", "-") else exponent
        if digits == "" or not _all_digits(digits):
            raise NumberError("syntax", text)
        value = _parse_exponent(digits)
        exp = -value if exponent.startswith("-") else value
    digits = int_part + frac_part
    exp -= len(frac_part)
    digits = digits.lstrip("0")
    if digits == "":
        return "0"
    kept = digits.rstrip("0")
    exp += len(digits) - len(kept)
    digits = kept

    length = len(digits)
    if exp >= 0:
        spelled = length + exp
    elif length + exp > 0:
        spelled = length + 1
    else:
        spelled = 2 + (-(length + exp)) + length
    if spelled + int(negative) > MAX_CANONICAL_NUMBER_LEN:
        raise NumberError("out-of-range", text)
    sign = "-" if negative else ""
    if exp >= 0:
        return sign + digits + "0" * exp
    point_at = length + exp
    if point_at > 0:
        return sign + digits[:point_at] + "." + digits[point_at:]
    return sign + "0." + "0" * (-point_at) + digits
