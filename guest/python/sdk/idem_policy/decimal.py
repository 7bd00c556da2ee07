"""Canonical decimal amounts, spelt exactly as the Rust SDK spells them.

Amounts often arrive as strings (``"10.50"``) because JSON numbers lose
precision in many clients. A fingerprint over the raw text would make
``"10.50"`` and ``"10.5"`` two requests; :func:`canonical_decimal` spells every
decimal one way, the way the host spells JSON numbers (no leading zeros, no
trailing fractional zeros, ``0`` never ``-0``).

Lengths are counted in UTF-8 bytes, as in Rust: the limits and the error
quotes must cut at the same place or two SDKs would give two messages.
"""

from typing import Final

MAX_DECIMAL_LEN: Final = 128
"""The longest decimal text accepted, in bytes (the host's limit for a
number's canonical spelling)."""

# How much of an offending text an error quotes: enough to recognise it,
# never the whole of a huge field.
_QUOTE_LIMIT = 40

# str.isdigit() accepts every Unicode digit ("٣"); the contract means ASCII.
_DIGITS = frozenset("0123456789")


class DecimalError(ValueError):
    """Why a text is not a decimal: ``text`` (cut to a few dozen bytes) and
    ``why``. ``str(err)`` reads like the Rust ``DecimalError``'s Display."""

    def __init__(self, text: str, why: str) -> None:
        self.text = text
        self.why = why
        super().__init__(f"`{text}` is not a decimal: {why}")


def _all_digits(s: str) -> bool:
    return all(c in _DIGITS for c in s)


def quote(text: str, limit: int = _QUOTE_LIMIT) -> str:
    """The start of ``text``, at most ``limit`` UTF-8 bytes cut at a character
    boundary, with ``…`` when cut."""
    raw = text.encode("utf-8", "surrogatepass")
    if len(raw) <= limit:
        return text
    end = limit
    # Back off over continuation bytes (0b10xxxxxx) to a character boundary.
    while end > 0 and (raw[end] & 0xC0) == 0x80:
        end -= 1
    return raw[:end].decode("utf-8", "surrogatepass") + "…"


def canonical_decimal(text: str) -> str:
    """The canonical spelling of a decimal given as text.

    Accepts an optional ``-``, digits, and an optional ``.`` followed by
    digits; raises :class:`DecimalError` for anything else (other signs,
    spaces, exponents, thousands separators, ``NaN``, an empty side of the
    point). The checks run in the Rust SDK's order, so the first reason given
    is the same.
    """

    def fail(why: str) -> DecimalError:
        return DecimalError(quote(text), why)

    if text == "":
        raise fail("it is empty")
    if len(text.encode("utf-8", "surrogatepass")) > MAX_DECIMAL_LEN:
        raise fail("it is longer than 128 characters")
    negative = text.startswith("-")
    unsigned = text[1:] if negative else text
    int_part, point, frac_part = unsigned.partition(".")
    has_frac = point == "."
    if not _all_digits(int_part) or (has_frac and not _all_digits(frac_part)):
        raise fail("only digits, one `.` and a leading `-` are allowed")
    if int_part == "":
        raise fail("it needs a digit before the `.`")
    if has_frac and frac_part == "":
        raise fail("it needs a digit after the `.`")
    int_part = int_part.lstrip("0")
    frac_part = frac_part.rstrip("0")
    if int_part == "" and frac_part == "":
        return "0"
    out = ("-" if negative else "") + (int_part or "0")
    if frac_part:
        out += "." + frac_part
    return out
