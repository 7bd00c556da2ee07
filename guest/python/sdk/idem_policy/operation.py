"""What a policy is handed: the canonical operation and its field values, with
typed accessors that refuse with a :class:`PolicyError` (never a bare
exception, which would be a trap in the host).

These are the SDK's own types, not componentize-py's generated ones, so that a
policy runs unchanged natively (in the cases runner) and in the component
(where :mod:`idem_policy.export` converts at the boundary).
"""

from dataclasses import dataclass, field as dc_field
from enum import Enum
from typing import Optional, Sequence, Union

from .decimal import DecimalError, canonical_decimal
from .errors import PolicyError


@dataclass(frozen=True)
class Text:
    """NFC-normalised text."""

    value: str

    def material(self) -> str:
        return self.value


@dataclass(frozen=True)
class Number:
    """A JSON number in canonical decimal text (``1.50e2`` arrives as ``150``)."""

    value: str

    def material(self) -> str:
        return self.value


@dataclass(frozen=True)
class Boolean:
    """A JSON ``true`` or ``false``."""

    value: bool

    def material(self) -> str:
        # The contract's spelling, never Python's "True".
        return "true" if self.value else "false"


Value = Union[Text, Number, Boolean]


@dataclass(frozen=True)
class Field:
    """One named field of an operation."""

    name: str
    value: Value


class Trigger(Enum):
    """Why an operation is being run (member names match the bindings')."""

    SCHEDULED = "scheduled"
    RETRY = "retry"
    MANUAL = "manual"
    CLIENT = "client"


@dataclass(frozen=True)
class RunContext:
    """The run that carries an operation; ``attempt`` is 1 for the first."""

    run_id: str
    trigger: Trigger
    attempt: int


@dataclass(frozen=True)
class Operation:
    """A canonical operation: fields sorted by name (bytewise), names unique;
    ``now_ms`` is the host's logical time (the policy has no clock)."""

    kind: str
    tenant: str
    # Any sequence in, a tuple kept (the operation is immutable).
    fields: Sequence[Field] = ()
    run: Optional[RunContext] = None
    now_ms: int = 0
    # Built once: the host guarantees unique names, so a dict lookup finds
    # exactly what the Rust SDK's binary search finds.
    _by_name: dict[str, Value] = dc_field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "fields", tuple(self.fields))
        object.__setattr__(self, "_by_name", {f.name: f.value for f in self.fields})

    def field(self, name: str) -> Optional[Value]:
        """The field's value, or ``None`` when absent."""
        return self._by_name.get(name)

    def text(self, name: str) -> str:
        """A text field: ``missing-field`` when absent, ``invalid-value`` when
        it is not text or is empty."""
        value = self.field(name)
        if value is None:
            raise PolicyError.missing(name)
        if not isinstance(value, Text):
            raise PolicyError.invalid(name, "must be a string")
        if value.value == "":
            raise PolicyError.invalid(name, "must not be empty")
        return value.value

    def material(self, name: str) -> str:
        """Any field as key material (text as is, numbers canonical, booleans
        ``true``/``false``); ``missing-field`` when absent."""
        value = self.field(name)
        if value is None:
            raise PolicyError.missing(name)
        return value.material()

    def decimal(self, name: str) -> str:
        """A decimal amount from a JSON number (``10.5``) or a string
        (``"10.50"``), canonically spelt: both give ``"10.5"``.
        ``missing-field`` when absent; ``invalid-value`` for a boolean or a
        string that is not a decimal (``"ten"``, ``"1,000"``, ``"1e3"``)."""
        value = self.field(name)
        if value is None:
            raise PolicyError.missing(name)
        if isinstance(value, Boolean):
            raise PolicyError.invalid(name, "must be a decimal like 10.50, not a boolean")
        try:
            return canonical_decimal(value.value)
        except DecimalError as e:
            raise PolicyError.invalid(name, f"must be a decimal like 10.50: {e}") from None

    def optional_text(self, name: str) -> Optional[str]:
        """A text field, or ``None`` when absent; ``invalid-value`` when present
        but not text. An empty text is returned as ``""`` (as in Rust)."""
        value = self.field(name)
        if value is None:
            return None
        if not isinstance(value, Text):
            raise PolicyError.invalid(name, "must be a string")
        return value.value
