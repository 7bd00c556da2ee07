"""How the host checks a derivation and makes keys of it
(``idem-core/src/digest.rs`` and ``derivation.rs``).

A digest is SHA-256 over::

    u32be(1)            encoding version
    lp(domain)          "key" or "fingerprint"
    lp(namespace)
    u32be(part count)
    lp(name) lp(value)  for each part, in the policy's order

where ``lp(x)`` is ``u32be(len(utf8(x)))`` then the UTF-8 bytes of ``x``.
"""

import hashlib
import json
import struct
from dataclasses import dataclass
from typing import Sequence

from ..derivation import Derivation, Part, PolicyInfo

KEY_ENCODING_VERSION = 1

MAX_PARTS = 32
MAX_PART_NAME = 64
MAX_MATERIAL = 8 * 1024
MAX_PARTITION = 512
MAX_LEASE_S = 24 * 3600
MAX_RETENTION_S = 10 * 366 * 24 * 3600


class Malformed(ValueError):
    """The host refuses what the policy returned."""

    def __init__(self, why: str) -> None:
        super().__init__(f"policy returned a malformed derivation: {why}")


def encode(domain: str, namespace: str, parts: Sequence[tuple[str, str]]) -> bytes:
    """The exact bytes that are hashed; ``parts`` are (name, value) pairs."""

    def lp(s: str) -> bytes:
        raw = s.encode("utf-8")
        return struct.pack(">I", len(raw)) + raw

    out = [struct.pack(">I", KEY_ENCODING_VERSION), lp(domain), lp(namespace)]
    out.append(struct.pack(">I", len(parts)))
    for name, value in parts:
        out.append(lp(name))
        out.append(lp(value))
    return b"".join(out)


def digest(domain: str, namespace: str, parts: Sequence[tuple[str, str]]) -> str:
    """64 lowercase hex characters."""
    return hashlib.sha256(encode(domain, namespace, parts)).hexdigest()


def _bounded(text: str, limit: int) -> str:
    # idem-core's text::bounded, quoted as Rust's {:?} would (near enough:
    # only the messages of failing cases depend on it).
    raw = text.encode("utf-8")
    if len(raw) > limit:
        end = limit
        while (raw[end] & 0xC0) == 0x80:
            end -= 1
        text = raw[:end].decode("utf-8") + f"…({len(raw)} bytes)"
    return json.dumps(text, ensure_ascii=False)


def _is_semver(v: str) -> bool:
    core = v.replace("+", "-").split("-", 1)[0]
    nums = core.split(".")
    return len(nums) == 3 and all(
        n != "" and n.isascii() and n.isdigit() and (len(n) == 1 or not n.startswith("0"))
        for n in nums
    )


def validate_info(info: PolicyInfo) -> None:
    """``PolicyInfo::validate``: raises :class:`Malformed`."""
    if not 1 <= len(info.name.encode()) <= 128:
        raise Malformed(f"policy name must be 1 to 128 bytes, got {_bounded(info.name, 64)}")
    if not 1 <= len(info.namespace.encode()) <= 128:
        raise Malformed(
            f"policy namespace must be 1 to 128 bytes, got {_bounded(info.namespace, 64)}"
        )
    if not _is_semver(info.version):
        raise Malformed(
            f"policy version {_bounded(info.version, 64)} is not a semantic version (like 1.2.0)"
        )
    if len(info.description.encode()) > 1024:
        raise Malformed("policy description is longer than 1024 bytes")


def _check_parts(what: str, parts: list[Part], may_be_empty: bool) -> None:
    if not parts and not may_be_empty:
        raise Malformed(f"{what} has no parts: every operation would share one key")
    if len(parts) > MAX_PARTS:
        raise Malformed(f"{what} has {len(parts)} parts; the limit is {MAX_PARTS}")
    material = 0
    for i, part in enumerate(parts):
        size = len(part.name.encode())
        if size == 0 or size > MAX_PART_NAME:
            raise Malformed(f"{what} part {i} has a name of {size} bytes (1 to {MAX_PART_NAME})")
        if any(p.name == part.name for p in parts[:i]):
            raise Malformed(f"{what} part `{part.name}` appears twice")
        material += size + len(part.value.encode())
    if material > MAX_MATERIAL:
        raise Malformed(f"{what} material is {material} bytes; the limit is {MAX_MATERIAL}")


@dataclass(frozen=True)
class Keyed:
    """A checked derivation with its keys (hex)."""

    key: str
    fingerprint: str
    partition: str
    retention_s: int
    lease_s: int


def finish(d: Derivation, namespace: str) -> Keyed:
    """``Derivation::finish``: the host's checks, then the two digests."""
    _check_parts("key", d.key_parts, False)
    _check_parts("fingerprint", d.fingerprint_parts, True)
    if not 1 <= len(d.partition.encode()) <= MAX_PARTITION:
        raise Malformed(f"partition must be 1 to {MAX_PARTITION} bytes")
    if not 1 <= d.lease_seconds <= MAX_LEASE_S:
        raise Malformed(f"lease_s must be 1 to {MAX_LEASE_S} seconds, got {d.lease_seconds}")
    if not 1 <= d.retention_seconds <= MAX_RETENTION_S:
        raise Malformed(
            f"retention_s must be 1 to {MAX_RETENTION_S} seconds, got {d.retention_seconds}"
        )
    if d.retention_seconds < d.lease_seconds:
        raise Malformed(
            f"retention_s ({d.retention_seconds}) is shorter than lease_s ({d.lease_seconds}): "
            "a record would vanish while claimed"
        )

    def pairs(ps: list[Part]) -> list[tuple[str, str]]:
        return [(p.name, p.value) for p in ps]

    return Keyed(
        key=digest("key", namespace, pairs(d.key_parts)),
        fingerprint=digest("fingerprint", namespace, pairs(d.fingerprint_parts)),
        partition=d.partition,
        retention_s=d.retention_seconds,
        lease_s=d.lease_seconds,
    )
