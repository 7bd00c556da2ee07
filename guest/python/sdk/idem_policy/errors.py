"""A policy's typed refusal to derive a key.

In Rust ``derive`` returns ``Err(PolicyError)``; in Python it raises one. The
export glue turns it into the contract's ``result`` error, and the cases
runner reads it as the host would. Any *other* exception is a bug in the
policy: in the component it fails the evaluation (the host shows its last
traceback line and the policy's line), so refuse with a ``PolicyError``
instead.
"""

from enum import Enum
from typing import Optional


class ErrorCode(Enum):
    """The contract's error codes; values are its spelling."""

    MISSING_FIELD = "missing-field"
    INVALID_VALUE = "invalid-value"
    UNSUPPORTED_KIND = "unsupported-kind"


class PolicyError(Exception):
    """A refusal: ``code``, the ``field`` at fault (or ``None``), ``message``.

    ``str(err)`` reads as the host prints it:
    ``missing-field (400) in field `customer`: the operation has no `customer```.
    """

    def __init__(self, code: ErrorCode, field: Optional[str], message: str):
        self.code = code
        self.field = field
        self.message = message
        super().__init__(str(self))

    def __str__(self) -> str:
        where = f" in field `{self.field}`" if self.field is not None else ""
        # Every policy refusal is the client's fault: the host answers 400.
        return f"{self.code.value} (400){where}: {self.message}"

    def __repr__(self) -> str:
        return f"PolicyError({self.code}, {self.field!r}, {self.message!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PolicyError) and (self.code, self.field, self.message) == (
            other.code,
            other.field,
            other.message,
        )

    __hash__ = Exception.__hash__

    @classmethod
    def missing(cls, field: str) -> "PolicyError":
        """A required field is absent."""
        return cls(ErrorCode.MISSING_FIELD, field, f"the operation has no `{field}`")

    @classmethod
    def invalid(cls, field: str, why: str) -> "PolicyError":
        """A field's value is unacceptable: ``why`` completes "`field` ..."."""
        return cls(ErrorCode.INVALID_VALUE, field, f"`{field}` {why}")

    @classmethod
    def unsupported_kind(cls, kind: str) -> "PolicyError":
        """The policy does not handle this kind of operation."""
        return cls(
            ErrorCode.UNSUPPORTED_KIND,
            None,
            f"this policy does not handle operations of kind `{kind}`",
        )
