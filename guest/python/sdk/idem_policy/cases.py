"""Native cases runner: a policy's cases file, run in CPython with the host's
semantics (``idem-core/src/cases.rs``, driven by ``guest/sdk/src/testing.rs``).

    python -m idem_policy.cases PATH/TO/app.py|POLICY_DIR cases.json

prints one line per case and ``N passed, N failed``; exits 1 on any failure,
2 when the policy or the cases file cannot be read. Operations are
canonicalised and keys hashed as the host does them, so a file that passes
here should pass under ``idem test`` against the built component.
"""

import importlib.util
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, Sequence, TypeVar, Union, cast

from . import contract
from ._host import cases_file, gate, keys
from ._host.operation_json import OpError, operation_from_value
from .decision import Decision, DuplicateContext, RecordState
from .errors import ErrorCode, PolicyError
from .failure import describe_failure
from .derivation import PolicyInfo
from .operation import Operation
from .policy import Policy

T = TypeVar("T")

_CODES = {c.value: c for c in ErrorCode}


@dataclass
class CaseResult:
    name: str
    passed: bool
    detail: str


@dataclass
class Report:
    results: list[CaseResult] = field(default_factory=list)

    @property
    def passed(self) -> int:
        return sum(r.passed for r in self.results)

    @property
    def failed(self) -> int:
        return len(self.results) - self.passed

    def summary(self) -> str:
        return f"{self.passed} passed, {self.failed} failed"


class _Trap(Exception):
    """A call that would trap in the host (an exception, a wrong type)."""


def _roots(policy_class: type) -> list[str]:
    """The directories frames are shown from, as the host shows them from the
    component's layout: the SDK's as ``idem_policy/…``, the policy's relative
    to its module's directory; the deeper first."""
    roots = [os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]
    # The module's file as its code names it (load_policy does not register
    # the module in sys.modules, so the class's own methods tell).
    code = getattr(getattr(policy_class, "derive", None), "__code__", None)
    module_dir = os.path.dirname(code.co_filename) if code is not None else ""
    if module_dir:
        roots.append(module_dir)
    return sorted(roots, key=len, reverse=True)


def _call(policy_class: type, what: str, fn: Callable[[], T]) -> T:
    # A bare exception is a trap in the component: it fails this case alone,
    # as testing.rs's catch_unwind does for a panic. Its message names the
    # policy's own file and line, as the host's does (failure.py), so the
    # author looks there and not at the cases file.
    try:
        return fn()
    except PolicyError:
        raise
    except Exception as e:  # noqa: BLE001  (any exception is a trap)
        said = describe_failure(e, _roots(policy_class))
        raise _Trap(f"the policy raised in {what} (in the host: a trap): {said}") from None


def _decision_repr(d: Decision) -> str:
    # Rust's {decision:?}, near enough for a failure message.
    if d.name == "wait":
        return f"Wait {{ max_ms: {d.wait_ms} }}"
    if d.rejection is None:
        return {"replay": "Replay", "re-execute": "ReExecute"}[d.name]
    r = d.rejection
    after = "None" if r.retry_after_ms is None else f"Some({r.retry_after_ms})"
    label = "Reject" if d.name == "reject" else "MarkUnknown"
    return f"{label}(Rejection {{ status: {r.status}, reason: {r.reason!r}, retry_after_ms: {after} }})"


def run_cases(policy_class: type[Policy], file: cases_file.CasesFile) -> Report:
    """Runs every case of ``file`` against ``policy_class`` (a fresh instance
    per call, as the host instantiates the component afresh)."""
    report = Report()
    try:
        info = contract.check_info(_call(policy_class, "describe", lambda: policy_class().describe()))
        keys.validate_info(info)
    except (_Trap, keys.Malformed, contract.ContractError, PolicyError) as e:
        report.results.append(CaseResult("describe", False, str(e)))
        return report
    if file.policy is not None and file.policy != info.name:
        detail = f"the cases are for policy `{file.policy}`, this is `{info.name}`"
        report.results.append(CaseResult("describe", False, detail))
        return report
    # Every key a case derived, passing or not: one mistake, one failing case.
    seen: dict[str, keys.Keyed] = {}
    failed: set[str] = set()
    for case in file.cases:
        ok, detail, keyed = _run_case(policy_class, info, case, seen, failed)
        if keyed is not None:
            seen[case.name] = keyed
        if not ok:
            failed.add(case.name)
        report.results.append(CaseResult(case.name, ok, detail))
    return report


def _run_case(
    policy_class: type[Policy],
    info: PolicyInfo,
    case: cases_file.Case,
    seen: dict[str, keys.Keyed],
    failed: set[str],
) -> tuple[bool, str, Optional[keys.Keyed]]:
    e = case.expect
    if not any(k in e for k in cases_file.CHECKS):
        return False, "`expect` checks nothing; say what must hold", None
    try:
        op, _ = operation_from_value(case.op)
    except OpError as err:
        return False, f"the case's op is invalid: {err}", None
    try:
        if case.duplicate is None:
            return _derive_case(policy_class, info, op, e, seen, failed)
        ok, detail = _duplicate_case(policy_class, op, case.duplicate, e)
        return ok, detail, None
    except _Trap as trap:
        return False, str(trap), None


def _derive_case(
    policy_class: type[Policy],
    info: PolicyInfo,
    op: Operation,
    e: cases_file.Expect,
    seen: dict[str, keys.Keyed],
    failed: set[str],
) -> tuple[bool, str, Optional[keys.Keyed]]:
    try:
        derived = _call(policy_class, "derive", lambda: policy_class().derive(op))
        contract.check_derivation(derived)
        refusal = None
    except PolicyError as err:
        derived, refusal = None, err
        try:
            contract.check_error(err)
        except contract.ContractError as bad:
            raise _Trap(f"the policy's error cannot cross the contract (a trap): {bad}") from None
    except contract.ContractError as bad:
        raise _Trap(f"the policy's derivation cannot cross the contract (a trap): {bad}") from None
    if "error" in e:
        code = str(e["error"])  # a string: cases_file read it as one
        if code not in _CODES:
            return False, (
                f"unknown error code `{code}`: expected missing-field, invalid-value or "
                "unsupported-kind"
            ), None
        if refusal is None:
            return False, f"expected policy error {code}, got a key", None
        if refusal.code is not _CODES[code]:
            return False, f"expected policy error {code}, got {refusal}", None
        if "field" in e and refusal.field != e["field"]:
            return False, f"expected the error to name field {e['field']!r}, got {refusal}", None
        return True, f"refused: {refusal}", None
    if refusal is not None:
        return False, f"expected a key, got policy error {refusal}", None
    assert derived is not None  # no refusal: check_derivation passed
    try:
        keyed = keys.finish(derived, info.namespace)
    except keys.Malformed as m:
        return e.get("malformed") is True, str(m), None
    if e.get("malformed") is True:
        return False, "expected the host to refuse the derivation, it was accepted", keyed
    problems = []
    for what in ("key", "fingerprint"):
        got = getattr(keyed, what)
        if what in e and e[what] != got:
            problems.append(f"{what}: expected {e[what]}, got {got}")
    if "partition" in e and e["partition"] != keyed.partition:
        problems.append(f"partition: expected {e['partition']!r}, got {keyed.partition!r}")
    for what in ("retention_s", "lease_s"):
        if what in e and e[what] != getattr(keyed, what):
            problems.append(f"{what}: expected {e[what]}, got {getattr(keyed, what)}")
    relations = (
        ("same_key_as", "key", True),
        ("key_differs_from", "key", False),
        ("same_fingerprint_as", "fingerprint", True),
        ("fingerprint_differs_from", "fingerprint", False),
    )
    for member, what, want_equal in relations:
        other = e.get(member)
        if not isinstance(other, str):  # absent (cases_file reads it as a string)
            continue
        if other not in seen:
            problems.append(
                f"case {other!r} failed without deriving a key to compare with"
                if other in failed
                else f"no earlier case named {other!r} with a key"
            )
            continue
        mine, theirs = getattr(keyed, what), getattr(seen[other], what)
        if (mine == theirs) != want_equal:
            rel = "equal" if want_equal else "differ from"
            problems.append(f"{what} should {rel} that of {other!r} ({mine} vs {theirs})")
    if problems:
        return False, "; ".join(problems), keyed
    return True, f"key {keyed.key[:16]}…", keyed


def _duplicate_case(
    policy_class: type[Policy], op: Operation, dup: cases_file.DuplicateSpec, e: cases_file.Expect
) -> tuple[bool, str]:
    ctx = DuplicateContext(
        operation=op,
        state=dup.state,
        fingerprint_matches=dup.fingerprint_matches,
        attempts=dup.attempts,
        age_ms=dup.age_ms,
        # Only an in-progress record has a lease; any other state is handed 0.
        lease_remaining_ms=dup.lease_remaining_ms if dup.state is RecordState.IN_PROGRESS else 0,
        outcome=dup.outcome,
    )
    want = e.get("decision")
    if want is not None and want not in contract.DECISION_NAMES:
        names = ", ".join(contract.DECISION_NAMES)
        return False, f"unknown decision `{want}` in `expect`: expected {names}"
    try:
        decision = contract.check_decision(_call(policy_class, "on-duplicate", lambda: policy_class().on_duplicate(ctx)))
    except PolicyError as err:
        # on-duplicate has no error result: raising one is a trap.
        raise _Trap(f"the policy raised in on-duplicate (in the host: a trap): {err}") from None
    except contract.ContractError as bad:
        raise _Trap(f"the policy's decision cannot cross the contract (a trap): {bad}") from None
    try:
        gate.check_decision(ctx, decision)
        refused = None
    except gate.UnsafeDecision as u:
        refused = u
    problems = []
    if e.get("unsafe") is True and refused is None:
        problems.append(f"expected the host to refuse `{decision.name}`, it was allowed")
    if e.get("unsafe") is not True and refused is not None:
        problems.append(f"the host refused the decision: {refused}")
    if want is not None and want != decision.name:
        problems.append(f"decision: expected {want}, got {decision.name}")
    r = decision.rejection if decision.name in ("reject", "mark-unknown") else None
    if "status" in e:
        if r is None:
            problems.append(f"status: expected {e['status']}, but `{decision.name}` has none")
        elif r.status != e["status"]:
            problems.append(f"status: expected {e['status']}, got {r.status}")
    if "retry_after_ms" in e:
        got = None if r is None else r.retry_after_ms
        if got != e["retry_after_ms"]:
            shown = "None" if got is None else f"Some({got})"
            problems.append(f"retry_after_ms: expected {e['retry_after_ms']}, got {shown}")
    if "wait_ms" in e and not (decision.name == "wait" and decision.wait_ms == e["wait_ms"]):
        problems.append(f"wait_ms: expected wait {e['wait_ms']}, got {_decision_repr(decision)}")
    if problems:
        return False, "; ".join(problems)
    return True, decision.name if refused is None else f"refused as expected: {refused}"


def load_policy(path: Union[str, "os.PathLike[str]"]) -> type[Policy]:
    """The policy class of a module file, or of ``app.py`` in a directory: the
    module's exported ``Policy`` (``Policy = export(MyPolicy)``)."""
    path = Path(path)
    module_path = path / "app.py" if path.is_dir() else path
    if not module_path.is_file():
        raise FileNotFoundError(f"no policy module at {module_path}")
    # The policy's own directory first, so it can import its sibling modules.
    sys.path.insert(0, str(module_path.parent.resolve()))
    name = f"_idem_policy_under_test_{abs(hash(str(module_path.resolve())))}"
    spec = importlib.util.spec_from_file_location(name, module_path)
    if spec is None or spec.loader is None:
        raise LookupError(f"{module_path} cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    exported = getattr(module, "Policy", None)
    policy_class = getattr(exported, "__idem_policy__", None)
    if policy_class is None:
        raise LookupError(f"{module_path} has no `Policy = idem_policy.export(YourPolicy)`")
    # What export() was handed: a Policy, or a class with its three methods.
    return cast(type[Policy], policy_class)


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print("usage: python -m idem_policy.cases POLICY_MODULE_OR_DIR CASES.json", file=sys.stderr)
        return 2
    policy_path, cases_path = argv
    try:
        policy_class = load_policy(policy_path)
        text = Path(cases_path).read_text(encoding="utf-8")
        file = cases_file.parse(text)
    except (OSError, LookupError, cases_file.CasesFileError, UnicodeDecodeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    report = run_cases(policy_class, file)
    print(f"{cases_path}: {len(report.results)} cases")
    for r in report.results:
        print(f"{'ok  ' if r.passed else 'FAIL'} {r.name}: {r.detail}")
    print(report.summary())
    if not report.results:
        print(f"{cases_path} has no cases", file=sys.stderr)
        return 1
    return 0 if report.failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
