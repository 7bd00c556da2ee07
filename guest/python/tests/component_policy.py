"""A built policy component, driven through the PyPI ``wasmtime`` package,
behind the SDK's ``Policy`` interface, so the native cases runner can run a
cases file against the ``.wasm`` itself (as testing.rs's
``assert_cases_in_host`` does with ``idem test``).

Every call gets a fresh instance, as the host gives every evaluation one. The
one import the host provides, ``idem:policy/diagnostics``, is linked as the
host links it: a failing call's trap carries what the policy said. Any other
import fails to instantiate.
Needs ``wasmtime`` (not the standard library): the tests skip without it.
"""

import wasmtime
from wasmtime import component as wc

from idem_policy import (
    Decision,
    Derivation,
    ErrorCode,
    PolicyError,
    PolicyInfo,
    Rejection,
)
from idem_policy.operation import Boolean, Number, Text

INTERFACE = "idem:policy/policy@0.1.0"
DIAGNOSTICS = "idem:policy/diagnostics@0.1.0"


def _record(**members):
    # wasmtime-py reads record members by their WIT (kebab-case) names, and
    # tells an option's record from its none by the class: it must be a Record.
    rec = wc.Record()
    for k, v in members.items():
        setattr(rec, k.replace("_", "-"), v)
    return rec


def _get(rec, name):
    return getattr(rec, name.replace("_", "-"))


def _operation(op):
    tags = {Text: "text", Number: "number", Boolean: "boolean"}
    run = None
    if op.run is not None:
        run = _record(run_id=op.run.run_id, trigger=op.run.trigger.value, attempt=op.run.attempt)
    return _record(
        kind=op.kind,
        tenant=op.tenant,
        fields=[_record(name=f.name, value=wc.Variant(tags[type(f.value)], f.value.value)) for f in op.fields],
        run=run,
        now_ms=op.now_ms,
    )


def component_policy(path: str, engine: "wasmtime.Engine | None" = None) -> type:
    """A Policy class whose calls run in the component at ``path``."""
    engine = engine or wasmtime.Engine()
    component = wc.Component.from_file(engine, path)
    linker = wc.Linker(engine)
    said: list[str] = []
    with linker.root() as root:
        with root.add_instance(DIAGNOSTICS) as diagnostics:
            diagnostics.add_func("failing", lambda _store, message: said.append(message))

    def call(name: str, *args):
        said.clear()
        store = wasmtime.Store(engine)
        instance = linker.instantiate(store, component)
        iface = instance.get_export_index(store, INTERFACE)
        func = instance.get_func(store, instance.get_export_index(store, name, iface))
        try:
            return func(store, *args)
        except (wasmtime.Trap, wasmtime.WasmtimeError) as trap:
            if said:
                raise RuntimeError(f"uncaught in the policy: {said[0]}") from trap
            raise

    class ComponentPolicy:
        wasm = path

        def describe(self):
            i = call("describe")
            return PolicyInfo(i.name, i.version, i.namespace, i.description)

        def derive(self, op):
            result = call("derive", _operation(op))
            if result.tag == "err":
                e = result.payload
                code = {c.value: c for c in ErrorCode}[e.code]
                raise PolicyError(code, e.field, e.message)
            d = result.payload
            out = Derivation(d.partition).retention_s(_get(d, "retention_s")).lease_s(_get(d, "lease_s"))
            for p in d.key:
                out.key(p.name, p.value)
            for p in d.fingerprint:
                out.fingerprint(p.name, p.value)
            return out

        def on_duplicate(self, ctx):
            outcome = None
            if ctx.outcome is not None:
                o = ctx.outcome
                outcome = _record(status=o.status, size=o.size, error=o.error)
            d = call(
                "on-duplicate",
                _record(
                    operation=_operation(ctx.operation),
                    state=ctx.state.value,
                    fingerprint_matches=ctx.fingerprint_matches,
                    attempts=ctx.attempts,
                    age_ms=ctx.age_ms,
                    lease_remaining_ms=ctx.lease_remaining_ms,
                    outcome=outcome,
                ),
            )
            if d.tag == "wait":
                return Decision.wait(d.payload)
            if d.tag in ("reject", "mark-unknown"):
                r = d.payload
                rejection = Rejection(r.status, r.reason, _get(r, "retry_after_ms"))
                return Decision(d.tag, rejection=rejection)
            return Decision(d.tag)

    return ComponentPolicy
