"""Who a policy is, and what it derives: key and fingerprint material, the
partition, how long to remember the effect and how long a claim holds.

The host, never the policy, hashes the parts into keys; the order of parts
matters and is kept exactly as appended.
"""

from dataclasses import dataclass
from typing import Final

MINUTE: Final = 60
"""Seconds in a minute."""
HOUR: Final = 3600
"""Seconds in an hour."""
DAY: Final = 24 * HOUR
"""Seconds in a day."""


@dataclass(frozen=True)
class PolicyInfo:
    """Short stable name, semantic version, key namespace, one-line description."""

    name: str
    version: str
    namespace: str
    description: str


@dataclass(frozen=True)
class Part:
    """One named piece of key or fingerprint material."""

    name: str
    value: str


class Derivation:
    """What ``derive`` returns, built like the Rust SDK's builder::

        Derivation(customer).key("customer", customer).fingerprint("amount", amount)
            .retention_s(400 * DAY).lease_s(5 * MINUTE)

    Until told otherwise: one-day retention, five-minute lease (as in Rust).
    The builder methods carry the contract's names (``retention_s``,
    ``lease_s``), so the stored values are ``retention_seconds`` and
    ``lease_seconds``.
    """

    __slots__ = ("key_parts", "fingerprint_parts", "partition", "retention_seconds", "lease_seconds")

    def __init__(self, partition: str) -> None:
        self.key_parts: list[Part] = []
        self.fingerprint_parts: list[Part] = []
        self.partition: str = partition
        self.retention_seconds: int = DAY
        self.lease_seconds: int = 5 * MINUTE

    def key(self, name: str, value: str) -> "Derivation":
        """Appends a named part of the key material (order matters)."""
        self.key_parts.append(Part(name, value))
        return self

    def fingerprint(self, name: str, value: str) -> "Derivation":
        """Appends a named part of the fingerprint material."""
        self.fingerprint_parts.append(Part(name, value))
        return self

    def retention_s(self, seconds: int) -> "Derivation":
        """How long the record is kept, in seconds."""
        self.retention_seconds = seconds
        return self

    def lease_s(self, seconds: int) -> "Derivation":
        """How long a claim holds before its lease expires, in seconds."""
        self.lease_seconds = seconds
        return self

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Derivation) and all(
            getattr(self, s) == getattr(other, s) for s in self.__slots__
        )

    def __repr__(self) -> str:
        return (
            f"Derivation(partition={self.partition!r}, key={self.key_parts!r}, "
            f"fingerprint={self.fingerprint_parts!r}, retention_s={self.retention_seconds}, "
            f"lease_s={self.lease_seconds})"
        )
