"""A policy's cases in its tests (pytest or unittest): natively, in CPython
with the SDK's replica of the host (fast: run it on every edit), and through
the built component in the host itself (``idem build`` when a source is newer
than the component, then ``idem test``), so a divergence between the native
runner and the host shows in ``pytest``, not first in production::

    from idem_policy.testing import find_idem, run_cases_file, run_component_cases

    def test_the_cases_natively():
        report = run_cases_file(PROJECT, CASES)
        assert report.results and report.failed == 0, report.text(CASES)

    @pytest.mark.skipif(find_idem() is None, reason="idem is not on PATH")
    def test_the_cases_through_the_built_component():
        run = run_component_cases(PROJECT, CASES)
        assert run.passed, run.output

Native only: the build leaves this module out of a component.
"""

import os
import shutil
import subprocess
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Union

from ._host import cases_file
from .cases import Report, load_policy, run_cases

__all__ = ["ComponentRun", "NativeReport", "find_idem", "run_cases_file", "run_component_cases"]

PathLike = Union[str, "os.PathLike[str]"]

# Entries a build never reads: its output, caches, environments, tests.
_NOT_SOURCES = frozenset({"dist", "build", "venv", "tests", "__pycache__"})


@dataclass
class NativeReport(Report):
    """A :class:`~idem_policy.cases.Report` that prints as ``idem test`` does."""

    def text(self, cases_path: PathLike) -> str:
        """A header, one line per case, the summary."""
        lines = [f"{cases_path}: {len(self.results)} cases"]
        lines += [f"{'ok  ' if r.passed else 'FAIL'} {r.name}: {r.detail}" for r in self.results]
        lines.append(self.summary())
        return "\n".join(lines)


def run_cases_file(policy: PathLike, cases_path: PathLike) -> NativeReport:
    """Runs the cases file at ``cases_path`` natively against the policy
    module (or the ``app.py`` of the directory) ``policy``.

    :raises OSError, LookupError, CasesFileError: a policy or a file that
        cannot be read
    """
    file = cases_file.parse(Path(cases_path).read_text(encoding="utf-8"))
    return NativeReport(run_cases(load_policy(policy), file).results)


def find_idem() -> Optional[str]:
    """The ``idem`` CLI: ``$IDEM``, else ``idem`` on ``PATH``; ``None`` when
    there is none (the component cannot be tested here)."""
    return os.environ.get("IDEM") or shutil.which("idem")


@dataclass
class ComponentRun:
    """What :func:`run_component_cases` found."""

    component: Path
    """The component tested: ``dist/NAME.wasm`` of the project."""
    built: bool
    """Whether ``idem build`` ran first."""
    passed: bool
    """Whether every case passed in the host (and the build, when one ran)."""
    output: str
    """What idem printed: the build's output when it failed, else ``idem test``'s."""


def _newest_source(directory: Path) -> float:
    newest = 0.0
    for entry in directory.iterdir():
        if entry.name.startswith(".") or entry.name in _NOT_SOURCES:
            continue
        if entry.is_dir():
            newest = max(newest, _newest_source(entry))
        elif entry.is_file():
            newest = max(newest, entry.stat().st_mtime)
    return newest


def _run(idem: str, args: list[str]) -> tuple[Optional[int], str]:
    try:
        done = subprocess.run([idem, *args], capture_output=True, text=True, check=False)
    except OSError as e:
        return None, f"cannot run {idem}: {e}"
    return done.returncode, done.stdout + done.stderr


def run_component_cases(
    project: PathLike, cases_path: PathLike, idem: Optional[str] = None
) -> ComponentRun:
    """Runs the cases file at ``cases_path`` against the project's built
    component, as the host runs it: ``idem build PROJECT`` first when
    ``dist/NAME.wasm`` is missing or older than a file of the project (outside
    ``dist/``, ``tests/``, caches and dot entries; the cases file is built in
    as golden vectors), then ``idem test --policy dist/NAME.wasm CASES``.

    :param project: the directory of the policy's ``pyproject.toml``
    :param idem: the CLI (default :func:`find_idem`)
    :raises FileNotFoundError: when there is no idem
    """
    idem = idem or find_idem()
    if idem is None:
        raise FileNotFoundError("idem is not on PATH (nor named by $IDEM): the component cannot be tested")
    directory = Path(project).resolve()
    with open(directory / "pyproject.toml", "rb") as manifest:
        name = str(tomllib.load(manifest)["project"]["name"])
    component = directory / "dist" / f"{name}.wasm"
    built_at = component.stat().st_mtime if component.is_file() else 0.0
    built = built_at <= _newest_source(directory)
    if built:
        status, output = _run(idem, ["build", str(directory)])
        if status != 0:
            return ComponentRun(component, built, False, f"idem build failed:\n{output}")
    status, output = _run(idem, ["test", "--policy", str(component), str(Path(cases_path).resolve())])
    return ComponentRun(component, built, status == 0, output)
