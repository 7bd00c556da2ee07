"""The glue between a :class:`~idem_policy.Policy` and componentize-py's
generated bindings for the world ``idempotency-policy``.

componentize-py looks in the app module for a class named after the exported
interface, ``Policy``, implementing ``wit_world.exports.Policy``. A policy
module therefore ends with::

    Policy = idem_policy.export(MyPolicy)

In the component (``sys.platform == "wasi"``) the bindings are imported
unconditionally, so a broken build fails loudly instead of exporting nothing.
Natively there are usually no bindings; ``export`` then returns a class that
only names the policy (``__idem_policy__``) for the cases runner.

In the component an exception that escapes the policy is reported to the host
before it traps, and the calls that would trap silently raise instead (see
:mod:`idem_policy.failure`).
"""

import os
import sys
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

from . import contract, failure
from .decision import DuplicateContext, OutcomeSummary, RecordState
from .derivation import Part
from .errors import PolicyError
from .operation import Boolean, Field, Number, Operation, RunContext, Text, Trigger
from .policy import Policy


def export(policy_class: type[Policy]) -> type:
    """The class to bind as the app module's ``Policy``: the componentize-py
    export in the component, a class naming ``policy_class`` natively."""
    if sys.platform != "wasi":
        try:
            import wit_world.exports  # noqa: F401  (bindings on the path natively)
        except ImportError:
            return _native(policy_class)
    return _bound(policy_class)


def _native(policy_class: type[Policy]) -> type:
    class NativePolicy:
        __idem_policy__ = policy_class

        def __getattr__(self, name: str) -> NoReturn:
            raise RuntimeError(
                "no componentize-py bindings here: run the policy with "
                "`python -m idem_policy.cases`, or build it with componentize-py"
            )

    NativePolicy.__name__ = NativePolicy.__qualname__ = "Policy"
    return NativePolicy


# The bindings are generated at build time and untyped for mypy (`Any`): the
# conversions below are where their types meet the SDK's.
def _bound(policy_class: type[Policy]) -> type:
    from componentize_py_types import Err
    from wit_world import exports
    from wit_world.exports import policy as wit
    from wit_world.imports import diagnostics

    # Frames are named relative to the policy's directory, then the SDK's
    # (`app.py`, `idem_policy/operation.py`).
    module = sys.modules.get(policy_class.__module__)
    roots = [os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]
    module_file = getattr(module, "__file__", None)
    if isinstance(module_file, str):
        roots.insert(0, os.path.dirname(os.path.abspath(module_file)))

    T = TypeVar("T")

    def reported(call: Callable[[], T]) -> T:
        # At call time, not when the module is loaded: componentize-py's own
        # start-up, after the policy's module, still imports and prints.
        failure.guard_sandbox()
        try:
            return call()
        except Err:
            raise
        except BaseException as e:
            failure.reporting(diagnostics.failing, roots, e)
            raise

    value_types = {wit.Value_Text: Text, wit.Value_Number: Number, wit.Value_Boolean: Boolean}

    def operation(op: Any) -> Operation:
        fields = tuple(Field(f.name, value_types[type(f.value)](f.value.value)) for f in op.fields)
        run = None
        if op.run is not None:
            run = RunContext(op.run.run_id, Trigger[op.run.trigger.name], op.run.attempt)
        return Operation(op.kind, op.tenant, fields, run, op.now_ms)

    def context(ctx: Any) -> DuplicateContext:
        outcome = None
        if ctx.outcome is not None:
            o = ctx.outcome
            outcome = OutcomeSummary(o.status, o.size, o.error)
        return DuplicateContext(
            operation(ctx.operation),
            RecordState[ctx.state.name],
            ctx.fingerprint_matches,
            ctx.attempts,
            ctx.age_ms,
            ctx.lease_remaining_ms,
            outcome,
        )

    def rejection(r: Any) -> Any:
        return wit.Rejection(r.status, r.reason, r.retry_after_ms)

    class BoundPolicy(exports.Policy):  # type: ignore[misc]  # the bindings' base: untyped
        __idem_policy__ = policy_class

        def describe(self) -> Any:
            return reported(self._describe)

        def derive(self, op: Any) -> Any:
            return reported(lambda: self._derive(op))

        def on_duplicate(self, ctx: Any) -> Any:
            return reported(lambda: self._on_duplicate(ctx))

        def _describe(self) -> Any:
            i = contract.check_info(policy_class().describe())
            return wit.PolicyInfo(i.name, i.version, i.namespace, i.description)

        def _derive(self, op: Any) -> Any:
            try:
                d = policy_class().derive(operation(op))
            except PolicyError as e:
                contract.check_error(e)
                raise Err(wit.PolicyError(wit.ErrorCode[e.code.name], e.field, e.message))
            contract.check_derivation(d)

            def parts(ps: list[Part]) -> list[Any]:
                return [wit.Part(p.name, p.value) for p in ps]

            return wit.Derivation(
                parts(d.key_parts),
                parts(d.fingerprint_parts),
                d.partition,
                d.retention_seconds,
                d.lease_seconds,
            )

        def _on_duplicate(self, ctx: Any) -> Any:
            d = contract.check_decision(policy_class().on_duplicate(context(ctx)))
            if d.name == "replay":
                return wit.Decision_Replay()
            if d.name == "reject":
                return wit.Decision_Reject(rejection(d.rejection))
            if d.name == "wait":
                return wit.Decision_Wait(d.wait_ms)
            if d.name == "re-execute":
                return wit.Decision_ReExecute()
            return wit.Decision_MarkUnknown(rejection(d.rejection))

    BoundPolicy.__name__ = BoundPolicy.__qualname__ = "Policy"
    return BoundPolicy
