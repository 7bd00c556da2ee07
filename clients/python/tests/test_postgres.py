"""The completion inside the caller's own PostgreSQL transaction
(`idem_client.postgres`), against a real server whose store is PostgreSQL
and the same database: a business row and the completion commit together;
a deposed holder's completion raises `Fenced` and its row rolls back; a
completed record is never overwritten; a lost COMMIT answer is settled by
`completed_under`."""

from __future__ import annotations

import pytest

from idem_client import ExecuteAnswer, ReplayAnswer


def _ledger(conn, schema: str) -> str:
    """A business table beside idem's, in the store's schema (dropped with
    it); its qualified name."""
    from psycopg import sql

    table = sql.Identifier(schema, "ledger_py")
    with conn.transaction():
        conn.execute(
            sql.SQL("CREATE TABLE IF NOT EXISTS {} (invoice text, fence bigint)").format(table)
        )
    return table


def _rows(conn, table, invoice: str) -> int:
    from psycopg import sql

    with conn.transaction():
        row = conn.execute(
            sql.SQL("SELECT count(*) FROM {} WHERE invoice = %s").format(table), (invoice,)
        ).fetchone()
    return int(row[0])


def _charge(conn, table, invoice: str, fence: int) -> None:
    from psycopg import sql

    conn.execute(
        sql.SQL("INSERT INTO {} (invoice, fence) VALUES (%s, %s)").format(table), (invoice, fence)
    )


def test_the_business_row_and_the_completion_commit_together(client, op, pg_conn, pg_schema):
    from idem_client.postgres import complete_in, completed_under

    table = _ledger(pg_conn, pg_schema)
    operation = op("pg-commit")
    invoice = operation["fields"]["invoice_id"]
    begun = client.begin(operation, atomic=True)
    assert isinstance(begun, ExecuteAnswer), begun
    with pg_conn.transaction():
        _charge(pg_conn, table, invoice, begun.fence)
        done = complete_in(pg_conn, begun, status=0, body="charged in the ledger", schema=pg_schema)
    assert done.state == "completed" and done.fence == begun.fence and done.key == begun.key
    assert _rows(pg_conn, table, invoice) == 1
    replay = client.begin(operation)
    assert isinstance(replay, ReplayAnswer), replay
    assert replay.fence == begun.fence
    assert replay.outcome.status == 0 and replay.outcome.body == "charged in the ledger"
    # The read-back after a lost COMMIT answer: this completion, and no other.
    assert completed_under(pg_conn, begun, 0, "charged in the ledger", schema=pg_schema)
    assert not completed_under(pg_conn, begun, 0, "something else", schema=pg_schema)


def test_a_deposed_holder_gets_fenced_and_its_row_rolls_back(client, op, pg_conn, pg_schema):
    from idem_client.postgres import Fenced, complete_in, completed_under, log_refusal

    table = _ledger(pg_conn, pg_schema)
    operation = op("pg-deposed")
    invoice = operation["fields"]["invoice_id"]
    old = client.begin(operation)
    assert isinstance(old, ExecuteAnswer), old
    # Another holder takes the key over under a higher fence (the old one
    # recorded a retryable failure; the policy re-executes it).
    client.fail(old.key, old.fence, retryable=True, error="timed out")
    new = client.begin(operation)
    assert isinstance(new, ExecuteAnswer) and new.fence > old.fence, new

    with pytest.raises(Fenced) as refused:
        with pg_conn.transaction():
            _charge(pg_conn, table, invoice, old.fence)
            complete_in(pg_conn, old, body="charged", schema=pg_schema)
    assert refused.value.reason == "fenced"
    assert (refused.value.key, refused.value.fence) == (old.key, old.fence)
    assert f"fence {new.fence}" in str(refused.value), str(refused.value)
    assert _rows(pg_conn, table, invoice) == 0, "the deposed holder's row committed"
    # The refused write in the attempt log, once.
    assert log_refusal(pg_conn, refused.value, schema=pg_schema)
    assert not log_refusal(pg_conn, refused.value, schema=pg_schema)

    with pg_conn.transaction():
        _charge(pg_conn, table, invoice, new.fence)
        complete_in(pg_conn, new, body="charged", schema=pg_schema)
    assert _rows(pg_conn, table, invoice) == 1
    assert completed_under(pg_conn, new, 0, "charged", schema=pg_schema)
    assert not completed_under(pg_conn, old, 0, "charged", schema=pg_schema)


def test_a_completed_record_is_never_overwritten(client, op, pg_conn, pg_schema):
    from idem_client.postgres import Fenced, complete_in

    table = _ledger(pg_conn, pg_schema)
    operation = op("pg-final")
    invoice = operation["fields"]["invoice_id"]
    begun = client.begin(operation)
    assert isinstance(begun, ExecuteAnswer), begun
    with pg_conn.transaction():
        _charge(pg_conn, table, invoice, begun.fence)
        complete_in(pg_conn, begun, body=b"\x00first", schema=pg_schema)
    # The same holder completing again (a retried transaction) is refused,
    # its row rolled back with it.
    with pytest.raises(Fenced) as refused:
        with pg_conn.transaction():
            _charge(pg_conn, table, invoice, begun.fence)
            complete_in(pg_conn, begun, body=b"second", schema=pg_schema)
    assert refused.value.reason == "final"
    assert _rows(pg_conn, table, invoice) == 1
    replay = client.begin(operation)
    assert isinstance(replay, ReplayAnswer), replay
    assert replay.outcome.bytes() == b"\x00first"


def test_a_key_never_claimed_is_gone(client, op, pg_conn, pg_schema):
    from idem_client.postgres import Fenced, complete_in

    derived = client.derive(op("pg-never-begun"))
    with pytest.raises(Fenced) as refused:
        with pg_conn.transaction():
            pg_conn.execute("SELECT 1")
            complete_in(pg_conn, derived_claim(derived), body="charged", schema=pg_schema)
    assert refused.value.reason == "gone"


def test_the_completion_needs_an_open_transaction(client, op, pg_conn, pg_schema):
    from idem_client.postgres import complete_in

    operation = op("pg-no-transaction")
    begun = client.begin(operation)
    assert isinstance(begun, ExecuteAnswer), begun
    pg_conn.autocommit = True
    try:
        with pytest.raises(ValueError):
            complete_in(pg_conn, begun, body="charged", schema=pg_schema)
    finally:
        pg_conn.autocommit = False
    # Nothing was completed: the claim is still held, and completes.
    assert client.complete(begun.key, begun.fence, body="charged").state == "completed"


def derived_claim(derived):  # type: ignore[no-untyped-def]
    """A claim naming a key nobody began, under fence 1."""

    class Unclaimed:
        namespace = derived.namespace
        key = derived.key
        fence = 1

    return Unclaimed()
