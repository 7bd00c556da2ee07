"""How a policy's failure reaches the host, and what the sandbox refuses.

A wasm trap carries no text: an exception that escapes an export traps, and
the host would see a bare ``unreachable``. So the export glue catches it
first and hands its last traceback line and the policy's own file and line
to the host through the contract's ``diagnostics.failing`` import, then
lets it trap (:func:`describe_failure` makes the line).

Inside the component (componentize-py ``--stub-wasi``) every WASI call traps
at once, without a word: a clock, ``print``, a file, an ``import`` that has
to find a module on disk. :func:`guard_sandbox` replaces the common ones with
a :class:`SandboxError` saying why, which then reaches the host like any
exception. Natively none of this applies: the cases runner shows the
exception itself.
"""

import builtins
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

# Frames named in a report: the innermost, up to the first in the policy's own files.
MAX_FRAMES = 4

# The SDK's package, as a frame in it is named.
SDK_PACKAGE = "idem_policy"


class SandboxError(RuntimeError):
    """A call the policy's sandbox cannot serve (a clock, output, a file, a
    module to load): raised inside the component instead of a silent trap."""


def describe_failure(error: BaseException, roots: Sequence[str]) -> str:
    """One line: the traceback's last line (``TypeError: …``), then where it
    was raised, innermost first, up to the first frame in the policy's own
    files (``at derive (app.py:12)``). File names are shown relative to the
    first of ``roots`` (directories) they are in."""
    text = str(error)
    what = f"{type(error).__name__}: {text}" if text else type(error).__name__
    # The frames' own attributes, not the traceback module: it reads source
    # lines from files, and inside the component a file access traps.
    entries: list[tuple[str, int, str]] = []
    tb = error.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        entries.append((code.co_filename, tb.tb_lineno, code.co_name))
        tb = tb.tb_next
    frames: list[str] = []
    for filename, line, name in reversed(entries):
        shown = _relative(filename, roots)
        frames.append(f"{name} ({shown}:{line})")
        if not shown.startswith(SDK_PACKAGE + "/") or len(frames) >= MAX_FRAMES:
            break
    return f"{what} at {' ← '.join(frames)}" if frames else what


def _relative(filename: str, roots: Sequence[str]) -> str:
    for root in roots:
        prefix = root.rstrip("/") + "/"
        if filename.startswith(prefix):
            return filename[len(prefix):]
    return filename


def reporting(failing: Callable[[str], None], roots: Sequence[str], error: BaseException) -> None:
    """Tells the host why the call is about to fail. Never raises: the report
    must not hide the failure it reports."""
    try:
        failing(describe_failure(error, roots))
    except BaseException:  # noqa: BLE001  (anything: the failure itself still traps)
        pass


def _refuse(what: str, why: str) -> Callable[..., NoReturn]:
    def refused(*_args: Any, **_kwargs: Any) -> NoReturn:
        raise SandboxError(f"{what} is not available in a policy: {why}")

    refused.__name__ = what
    return refused


class _NoOutput:
    """``sys.stdout`` and ``sys.stderr`` inside the component."""

    def __init__(self, name: str) -> None:
        self.name = name

    def write(self, _text: str) -> NoReturn:
        raise SandboxError(
            f"print() and {self.name} are not available in a policy: it has no output "
            "(raise an exception to fail with a message, or a PolicyError to refuse)"
        )

    def flush(self) -> None:
        pass


class _NoLoading:
    """A meta path finder placed before the one that reads files: a module
    not loaded when the component was built cannot be found at call time."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> NoReturn:
        raise ImportError(
            f"`import {fullname}` while the policy runs: inside the component there are no files "
            "to load a module from; import it at the top of the policy's module, so it is "
            "loaded when the policy is built",
            name=fullname,
        )


_NO_LOADING = _NoLoading()


CLOCKS = (
    "time",
    "time_ns",
    "monotonic",
    "monotonic_ns",
    "perf_counter",
    "perf_counter_ns",
    "process_time",
    "process_time_ns",
    "sleep",
)

_NO_CLOCK = "a policy has no clock (the operation's logical time is op.now_ms)"
# Made when the module is loaded (at build time, into the component's
# snapshot): a call then only swaps them in.
_REFUSED_CLOCKS = {name: _refuse(f"time.{name}()", _NO_CLOCK) for name in CLOCKS if hasattr(time, name)}
_NO_STDOUT = _NoOutput("sys.stdout")
_NO_STDERR = _NoOutput("sys.stderr")
_NO_OPEN = _refuse("open()", "a policy has no files")
_NO_INPUT = _refuse("input()", "a policy has no input")


def guard_sandbox() -> None:
    """Replaces what traps silently inside the component with a
    :class:`SandboxError` (or an ``ImportError``) that says why. Called by
    the export glue as a call starts, inside the component only; once is
    enough."""
    if _NO_LOADING in sys.meta_path:
        return
    for name, refused in _REFUSED_CLOCKS.items():
        setattr(time, name, refused)
    sys.stdout = _NO_STDOUT
    sys.stderr = _NO_STDERR
    builtins.open = _NO_OPEN
    builtins.input = _NO_INPUT
    finders = [f for f in sys.meta_path if getattr(f, "__name__", "") == "PathFinder"]
    at = sys.meta_path.index(finders[0]) if finders else len(sys.meta_path)
    sys.meta_path.insert(at, _NO_LOADING)
