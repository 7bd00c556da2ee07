"""The completion inside your own PostgreSQL transaction (psycopg 3).

When `idem serve` keeps its records in PostgreSQL and your service's tables
live in the same database, your business writes and idem's completion can
commit in one transaction: a crash between "charged" and "recorded" can no
longer happen, and a holder that was deposed (another took the key over)
commits none of its writes.

    from idem_client.postgres import Fenced, complete_in

    begun = client.begin(operation)              # an ExecuteAnswer
    with conn.transaction():                     # psycopg 3
        conn.execute("INSERT INTO ledger (invoice, fence) VALUES (%s, %s)",
                     ("inv-1", begun.fence))
        complete_in(conn, begun, body="charged")  # raises Fenced if deposed

`complete_in` calls the store's SQL function `complete` (its schema's,
`idem` unless the store URL says `idem_schema=`), which locks the record,
checks the fence by the server's clock and writes the completion; a refusal
raises SQLSTATE `IDF01` inside your transaction, so it cannot commit. This
module needs psycopg 3 (`pip install "idem-client[postgres]"`); the rest of
the package does not. See docs/guide/effects-in-the-store.md in the idem
repository.
"""

from __future__ import annotations

from typing import Any, Optional, Protocol, Union

import psycopg
from psycopg import sql

from .answers import Finished
from .errors import IdemError

FENCED_SQLSTATE = "IDF01"
"""The SQLSTATE `complete` raises when the completion is refused (the
transaction is aborted)."""

INVALID_SQLSTATE = "IDF02"
"""The SQLSTATE `complete` raises for a request that cannot be right (a key
that is not 64 hexadecimal digits, a body over the store's 64 KiB)."""

Body = Union[str, bytes, None]
Executor = Union[psycopg.Connection[Any], psycopg.Cursor[Any]]


class Claim(Protocol):
    """What the completion names: an `ExecuteAnswer` of `begin` is one."""

    @property
    def namespace(self) -> str: ...

    @property
    def key(self) -> str: ...

    @property
    def fence(self) -> int: ...


class Fenced(IdemError):
    """The completion was refused, and the transaction is aborted: roll it
    back (leaving `with conn.transaction():` by this exception does). None of
    its writes may commit; committing it rolls back.

    `reason` says why: `fenced` (another holder took the key over under a
    higher fence: its run is the one that counts), `final` (the record is no
    longer in progress: already completed or failed, or sent to review) or
    `gone` (no live record under the key). `log_refusal` appends it to the
    attempt log once the transaction rolled back."""

    def __init__(self, message: str, namespace: str, key: str, fence: int, reason: str) -> None:
        super().__init__(message)
        self.namespace = namespace
        self.key = key
        self.fence = fence
        self.reason = reason


def _body_bytes(body: Body) -> bytes:
    if body is None:
        return b""
    if isinstance(body, str):
        return body.encode("utf-8")
    return bytes(body)


def _function(schema: str, name: str) -> sql.Composed:
    return sql.SQL("SELECT {}.{}(%s, %s, %s, %s, %s)").format(
        sql.Identifier(schema), sql.Identifier(name)
    )


def _cursor(executor: Executor) -> psycopg.Cursor[Any]:
    if isinstance(executor, psycopg.Cursor):
        return executor
    return executor.cursor()


def complete_in(
    executor: Executor,
    claim: Claim,
    status: int = 0,
    body: Body = None,
    *,
    schema: str = "idem",
) -> Finished:
    """Completes `claim` (what `begin` answered `execute` with) with
    `status` and `body` inside the transaction open on `executor` (a psycopg
    3 connection, or one of its cursors); you commit it.

    Text `body` is stored as UTF-8, `bytes` as they are, as
    `IdemClient.complete` stores them. The record's row stays locked until
    the transaction ends: keep the rest of it short.

    Raises `Fenced` when the completion is refused (the transaction is then
    aborted: roll it back), `ValueError` when no transaction is open (the
    completion would commit alone, without your writes), and psycopg's
    errors otherwise (an `IDF02` one for a request that cannot be right).
    If the answer to your COMMIT is lost, ask `completed_under` before doing
    anything else.
    """
    cursor = _cursor(executor)
    if cursor.connection.info.transaction_status != psycopg.pq.TransactionStatus.INTRANS:
        raise ValueError(
            "complete_in needs the transaction holding your writes to be open on this "
            "connection (inside `with conn.transaction():`, after your first statement)"
        )
    try:
        cursor.execute(
            _function(schema, "complete"),
            (claim.namespace, claim.key, claim.fence, status, _body_bytes(body)),
        )
    except psycopg.Error as e:
        if e.sqlstate == FENCED_SQLSTATE:
            raise Fenced(
                e.diag.message_primary or str(e),
                claim.namespace,
                claim.key,
                claim.fence,
                e.diag.message_detail or "",
            ) from e
        raise
    return Finished(key=claim.key, fence=claim.fence, state="completed")


def completed_under(
    executor: Executor,
    claim: Claim,
    status: int = 0,
    body: Body = None,
    *,
    schema: str = "idem",
) -> bool:
    """Whether the completion of `claim` with `status` and `body` committed:
    the question to ask when the answer to your COMMIT was lost (the
    connection dropped), on a connection that works, outside any other
    transaction. It waits until the old transaction is over on the server,
    so `True` proves it committed and `False` that it did not (then none of
    its writes did: run the transaction again; its completion is refused if
    the claim was lost meanwhile). An error leaves it unknown: ask again."""
    cursor = _cursor(executor)
    if cursor.connection.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        raise ValueError(
            "completed_under asks outside any transaction: it reads under the record's row "
            "lock, which a transaction of this connection would keep"
        )
    # A transaction of its own, committed at once: the lock it took is let go.
    with cursor.connection.transaction():
        cursor.execute(
            _function(schema, "completed_under"),
            (claim.namespace, claim.key, claim.fence, status, _body_bytes(body)),
        )
        row: Optional[Any] = cursor.fetchone()
    return bool(row and row[0])


def log_refusal(executor: Executor, refused: Fenced, *, schema: str = "idem") -> bool:
    """Appends the refused completion `refused` to the store's attempt log
    (`idem report` then shows the deposed holder's write), as the library
    logs it: call it after the transaction rolled back, outside any other.
    The rollback took any entry the refusal could have written. `True`
    when it appended one; `False` when there was nothing to log (no fence
    was deposed) or it is logged already."""
    cursor = _cursor(executor)
    if cursor.connection.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        raise ValueError("log_refusal runs after the refused transaction rolled back")
    with cursor.connection.transaction():
        cursor.execute(
            sql.SQL("SELECT {}.log_refused(%s, %s, %s)").format(sql.Identifier(schema)),
            (refused.namespace, refused.key, refused.fence),
        )
        row: Optional[Any] = cursor.fetchone()
    return bool(row and row[0])


__all__ = [
    "FENCED_SQLSTATE",
    "INVALID_SQLSTATE",
    "Claim",
    "Fenced",
    "complete_in",
    "completed_under",
    "log_refusal",
]
