"""Puts the SDK on the path and names the repository's files the tests read,
so the suite runs from anywhere with plain `python -m unittest`."""

import sys
from pathlib import Path

PYTHON = Path(__file__).resolve().parent.parent
REPO = PYTHON.parent.parent
SDK = PYTHON / "sdk"
POLICIES = ("billing-charge", "provider-charge", "http-idempotency-key")

if str(SDK) not in sys.path:
    sys.path.insert(0, str(SDK))


def python_policy(name: str) -> Path:
    return PYTHON / "policies" / name


def rust_cases(name: str) -> Path:
    # The Rust policy's own cases file: one file, two implementations.
    return REPO / "guest" / "policies" / name / "cases.json"
