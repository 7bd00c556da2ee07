"""The policy interface a team implements."""

from .decision import Decision, DuplicateContext
from .derivation import Derivation, PolicyInfo
from .operation import Operation


class Policy:
    """An idempotency policy. Subclass it, implement the three methods, and
    hand the class to :func:`idem_policy.export` as the module's ``Policy``.

    The policy must be pure: the same input gives the same answer, with no
    clock (use ``op.now_ms``), randomness or I/O. Keep no state between calls:
    the host evaluates every call in a fresh instance, while the native runner
    shares one interpreter (module globals survive there, not in the host).
    """

    def describe(self) -> PolicyInfo:
        """Name, semantic version, key namespace and a one-line description."""
        raise NotImplementedError

    def derive(self, op: Operation) -> Derivation:
        """Key material for an operation; raise :class:`PolicyError` to refuse."""
        raise NotImplementedError

    def on_duplicate(self, ctx: DuplicateContext) -> Decision:
        """What a duplicate gets. The host refuses an unsafe decision (e.g.
        re-executing a completed record) and rejects the duplicate."""
        raise NotImplementedError
