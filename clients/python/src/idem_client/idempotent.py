"""Running a body at most once per operation: `Call` (a context manager),
the `idempotent` decorator, and the heartbeat that keeps a long body's
claim.

How a result is stored: the body's return value is encoded as JSON text
(`json.dumps`) and completed with status 0, the API's status for success;
a replay decodes that text with `json.loads`, so a caller gets back an
equal value (a tuple comes back as a list, as JSON has no tuples). Pass
`encode` and `decode` to store something else, e.g. bytes.
"""

from __future__ import annotations

import contextvars
import functools
import json
import threading
import time
from types import TracebackType
from typing import TYPE_CHECKING, Any, Callable, Literal, Optional, TypeVar

from .answers import (
    ConflictAnswer,
    ExecuteAnswer,
    InProgressAnswer,
    Operation,
    Outcome,
    RejectedAnswer,
    ReplayAnswer,
    Run,
)
from .errors import (
    Conflict,
    FailedPermanently,
    IdemError,
    InProgress,
    OperationConflict,
    Permanent,
    Rejected,
    UnknownKey,
)

if TYPE_CHECKING:
    from .client import Body, IdemClient

_CLAIM: contextvars.ContextVar[Optional[ExecuteAnswer]] = contextvars.ContextVar(
    "idem_claim", default=None
)

# The API takes an `error` of any length, but a log line should stay one.
_ERROR_MAX_CHARS = 1000


def current_claim() -> Optional[ExecuteAnswer]:
    """The claim the innermost running idempotent body holds (its `key` and
    `fence` are what the downstream deduplicates and fences by), or `None`
    outside one."""
    return _CLAIM.get()


def encode_json(value: Any) -> str:
    """The default encoding of a body's result: compact JSON text."""
    return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def decode_json(outcome: Outcome) -> Any:
    """The default decoding of a replayed outcome: its body as JSON (`None`
    when no body was stored, e.g. a person completed it without one)."""
    raw = outcome.bytes()
    return json.loads(raw) if raw else None


class _Heartbeat:
    """A daemon thread that extends the claim's lease every `every` seconds
    until stopped. A lost claim (409, 404) stops it: beating cannot win the
    claim back, and the completion will say what happened. Any other error
    is left to the next beat, as the lease outlasts several beats."""

    def __init__(self, client: IdemClient, claim: ExecuteAnswer, every: float) -> None:
        self._client = client
        self._claim = claim
        self._every = every
        self._stop = threading.Event()
        self.lost: Optional[IdemError] = None
        self.beats = 0
        self._thread = threading.Thread(
            target=self._run, name=f"idem-heartbeat-{claim.key[:12]}", daemon=True
        )
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._every):
            try:
                self._client.heartbeat(self._claim.key, self._claim.fence, self._claim.lease_ms)
                self.beats += 1
            except (Conflict, UnknownKey) as e:
                self.lost = e
                return
            except IdemError:
                continue

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


class Call:
    """Performs an operation at most once, as a context manager.

    On entry it begins the operation. On `execute`, `should_run` is true:
    the block performs the effect (with `key` and `fence` handed
    downstream) and sets `result`, while a thread heartbeats every
    `heartbeat_every` seconds (default: a third of the lease); on a normal
    exit `result` is encoded and completed with `status` under the fence;
    on an exception the record is failed (permanently when the exception is
    a `Permanent` or one of the `permanent` types, else retryable) and the
    exception goes on. On `replay`, `should_run` is false and `result` is
    the stored result, decoded. On `in-progress` it begins again, after the
    answer's `retry_after_ms` but at most `poll_interval` seconds later,
    until `max_wait` seconds have passed; then it raises `InProgress`.
    `conflict`, `rejected` and a replayed permanent failure raise
    `OperationConflict`, `Rejected` and `FailedPermanently`.

        with client.idempotent(op) as call:
            if call.should_run:
                call.result = charge(call.key, call.fence)
        receipt = call.result
    """

    def __init__(
        self,
        client: IdemClient,
        operation: Operation,
        *,
        run: Optional[Run] = None,
        status: int = 0,
        encode: Optional[Callable[[Any], Body]] = None,
        decode: Optional[Callable[[Outcome], Any]] = None,
        permanent: tuple[type[BaseException], ...] = (),
        max_wait: float = 30.0,
        poll_interval: float = 1.0,
        heartbeat_every: Optional[float] = None,
    ) -> None:
        self.client = client
        self.operation = operation
        self.run = run
        self.status = status
        self.encode: Callable[[Any], Body] = encode or encode_json
        self.decode: Callable[[Outcome], Any] = decode or decode_json
        self.permanent = permanent
        self.max_wait = max_wait
        self.poll_interval = poll_interval
        self.heartbeat_every = heartbeat_every
        self.claim: Optional[ExecuteAnswer] = None
        self.replay: Optional[ReplayAnswer] = None
        self.result: Any = None
        self._heartbeat: Optional[_Heartbeat] = None
        self._token: Optional[contextvars.Token[Optional[ExecuteAnswer]]] = None

    @property
    def should_run(self) -> bool:
        """Whether this call holds the key and must perform the effect."""
        return self.claim is not None

    @property
    def replayed(self) -> bool:
        """Whether `result` is a stored result, the effect not performed."""
        return self.replay is not None

    @property
    def key(self) -> str:
        """The operation's key (on execute and replay)."""
        found = self.claim or self.replay
        if found is None:
            raise RuntimeError("the call has not begun")
        return found.key

    @property
    def fence(self) -> int:
        """The fence this call holds (on execute only)."""
        if self.claim is None:
            raise RuntimeError("only an executing call holds a fence")
        return self.claim.fence

    def __enter__(self) -> Call:
        deadline = time.monotonic() + self.max_wait
        while True:
            answer = self.client.begin(self.operation, self.run)
            if isinstance(answer, ExecuteAnswer):
                self.claim = answer
                every = self.heartbeat_every or answer.lease_ms / 3000
                self._heartbeat = _Heartbeat(self.client, answer, every)
                self._token = _CLAIM.set(answer)
                return self
            if isinstance(answer, ReplayAnswer):
                if answer.state != "completed":
                    raise FailedPermanently(answer)
                self.replay = answer
                self.result = self.decode(answer.outcome)
                return self
            if isinstance(answer, InProgressAnswer):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise InProgress(answer)
                hint = answer.retry_after_ms / 1000 if answer.retry_after_ms is not None else None
                time.sleep(
                    min(hint if hint is not None else self.poll_interval, self.poll_interval, left)
                )
                continue
            if isinstance(answer, ConflictAnswer):
                raise OperationConflict(answer)
            if isinstance(answer, RejectedAnswer):
                raise Rejected(answer)
            raise TypeError(f"unexpected begin answer {answer!r}")

    def __exit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> Literal[False]:
        claim = self.claim
        if claim is None:
            return False
        if self._token is not None:
            _CLAIM.reset(self._token)
            self._token = None
        if self._heartbeat is not None:
            self._heartbeat.stop()
        if exc is None:
            try:
                body = self.encode(self.result)
            except Exception as e:
                # The effect happened but its result cannot be stored: a
                # retry must not perform it again, so the failure is final.
                self.client.fail(
                    claim.key, claim.fence, retryable=False, error=_describe(e, "encoding")
                )
                raise
            self.client.complete(claim.key, claim.fence, status=self.status, body=body)
            return False
        retryable = not isinstance(exc, (Permanent, *self.permanent))
        try:
            self.client.fail(claim.key, claim.fence, retryable=retryable, error=_describe(exc))
        except IdemError as e:
            # The body's exception is what the caller must see; the failed
            # write (e.g. the claim was taken over meanwhile) goes with it.
            if hasattr(exc, "add_note"):
                exc.add_note(f"idem: recording the failure failed too: {e}")
        return False


def _describe(exc: BaseException, what: str = "") -> str:
    text = f"{type(exc).__name__}: {exc}"
    if what:
        text = f"{what} the result failed: {text}"
    return text[:_ERROR_MAX_CHARS]


F = TypeVar("F", bound=Callable[..., Any])


def idempotent(
    client: IdemClient,
    operation: Callable[..., Operation],
    **options: Any,
) -> Callable[[F], F]:
    """Makes a function run at most once per operation.

    `operation` is called with the function's arguments and names the
    operation; `options` are `IdemClient.idempotent`'s. The function runs
    only when this call holds the key (`current_claim()` gives it the key
    and fence); otherwise the stored result is returned.

        @idempotent(client, operation=lambda invoice, amount: charge_op(invoice, amount))
        def charge(invoice, amount):
            claim = current_claim()
            return provider.charge(invoice, amount, key=claim.key, fence=claim.fence)
    """

    def wrap(fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with client.idempotent(operation(*args, **kwargs), **options) as call:
                if call.should_run:
                    call.result = fn(*args, **kwargs)
            return call.result

        return wrapper  # type: ignore[return-value]

    return wrap
