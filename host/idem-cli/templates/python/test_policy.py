"""`pytest`: the cases natively, in CPython with the SDK's replica of the host
(fast: run it on every edit); then through the built component in the host
itself: `idem build` when a source changed since the last build, then `idem
test`. Without idem on PATH (or named by $IDEM) the second test is skipped,
and says so."""

from pathlib import Path

import pytest

from idem_policy.testing import find_idem, run_cases_file, run_component_cases

PROJECT = Path(__file__).resolve().parent.parent
CASES = PROJECT / "cases.json"


def test_the_cases_natively() -> None:
    report = run_cases_file(PROJECT, CASES)
    assert report.results, "cases.json holds no case"
    assert report.failed == 0, report.text(CASES)


@pytest.mark.skipif(
    find_idem() is None,
    reason="idem is not on PATH (nor named by $IDEM): the component was not tested",
)
def test_the_cases_through_the_built_component_in_the_host() -> None:
    run = run_component_cases(PROJECT, CASES)
    assert run.passed, run.output
