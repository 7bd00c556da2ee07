"""The tests run against a real `idem serve` serving the billing-charge
policy, named by `IDEM_SERVE_URL` (and `IDEM_SERVE_TOKEN` when it has one).
Without it every test is skipped, saying so, except under `CI=true`, where a
missing server is a failure: CI must never pass on tests that did not run.

`IDEM_TEST_RUN` prefixes every invoice id, so that a test run against a
store that already holds an earlier run's records starts from fresh keys;
it defaults to a random prefix. The Rust suite (tests/suite/clients.rs)
sets it to find this run's records in the store afterwards.
"""

from __future__ import annotations

import os
import uuid
from typing import Callable

import pytest

from idem_client import IdemClient, Operation

URL = os.environ.get("IDEM_SERVE_URL")
TOKEN = os.environ.get("IDEM_SERVE_TOKEN") or None
RUN = os.environ.get("IDEM_TEST_RUN") or uuid.uuid4().hex[:12]


def _ci() -> bool:
    return os.environ.get("CI", "") in ("true", "1")


def skip_or_fail(why: str) -> None:
    """Skips the test, or fails it under CI."""
    if _ci():
        pytest.fail(f"{why}, and CI=true: the test must run")
    pytest.skip(why)


@pytest.fixture(scope="session")
def server_url() -> str:
    if not URL:
        skip_or_fail(
            "IDEM_SERVE_URL is not set: start `idem serve --policy billing-charge.wasm"
            " --lease 3s ...` and set IDEM_SERVE_URL (and IDEM_SERVE_TOKEN)"
        )
    assert URL is not None
    return URL


@pytest.fixture
def client(server_url: str) -> IdemClient:
    return IdemClient(server_url, token=TOKEN)


@pytest.fixture
def op() -> Callable[..., Operation]:
    """`op(name, amount="100")`: a billing charge of its own invoice, whose
    id is this run's prefix and `name`."""

    def make(name: str, amount: str = "100") -> Operation:
        return {
            "kind": "charge",
            "tenant": "acme",
            "fields": {
                "customer": "c-py",
                "billing_period": "2026-11",
                "invoice_id": f"{RUN}-{name}",
                "amount": amount,
                "currency": "EUR",
            },
        }

    return make
