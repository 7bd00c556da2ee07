"""The tests run against a real `idem serve` serving the billing-charge
policy, named by `IDEM_SERVE_URL` (and `IDEM_SERVE_TOKEN` when it has one).
Without it every test is skipped, saying so, except under `CI=true`, where a
missing server is a failure: CI must never pass on tests that did not run.

`IDEM_TEST_RUN` prefixes every invoice id, so that a test run against a
store that already holds an earlier run's records starts from fresh keys;
it defaults to a random prefix. The Rust suite (tests/suite/clients/mod.rs)
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


# The PostgreSQL tests (tests/test_postgres.py) need, beside a server whose
# store is PostgreSQL, the same database (`IDEM_TEST_POSTGRES_URL`, a libpq
# URL) and the store's schema (`IDEM_TEST_POSTGRES_SCHEMA`, `idem` unless
# the store URL said `idem_schema=`). Without them they are skipped, except
# under CI=true.
PG_URL = os.environ.get("IDEM_TEST_POSTGRES_URL")
PG_SCHEMA = os.environ.get("IDEM_TEST_POSTGRES_SCHEMA") or "idem"


@pytest.fixture
def pg_schema() -> str:
    return PG_SCHEMA


@pytest.fixture
def pg_conn(server_url: str):  # type: ignore[no-untyped-def]
    """A psycopg 3 connection to the store's database, as a service beside
    the sidecar holds one."""
    if not PG_URL:
        skip_or_fail(
            "IDEM_TEST_POSTGRES_URL is not set: start `idem serve` on a PostgreSQL store and set"
            " IDEM_TEST_POSTGRES_URL (and IDEM_TEST_POSTGRES_SCHEMA) to its database"
        )
    try:
        import psycopg
    except ImportError:
        skip_or_fail("psycopg is not installed: pip install 'psycopg[binary]'")
    assert PG_URL is not None
    conn = psycopg.connect(PG_URL)
    try:
        yield conn
    finally:
        conn.close()
