"""`IdemClient`: one method per route of `idem serve`, over the standard
library's `urllib.request`."""

from __future__ import annotations

import base64
import json
import os
import socket
import sys
import urllib.error
import urllib.request
from http.client import HTTPException
from typing import TYPE_CHECKING, Any, Callable, Iterable, Literal, Mapping, Optional, Union

from .answers import (
    BeginAnswer,
    Derivation,
    Finished,
    Heartbeat,
    Operation,
    Resolved,
    Run,
    parse_begin,
)
from .errors import TransportError, problem_error

if TYPE_CHECKING:
    from .idempotent import Call

Body = Union[str, bytes, None]


def _body_members(body: Body) -> dict[str, str]:
    """`body` as the API takes it: text as `body`, bytes as `body_base64`."""
    if body is None:
        return {}
    if isinstance(body, bytes):
        return {"body_base64": base64.b64encode(body).decode("ascii")}
    return {"body": body}


#: The longest caller name the sidecar keeps, in bytes.
MAX_CALLER_BYTES = 128


def default_caller() -> str:
    """Who this process is, as `begin` tells the sidecar by default:
    `$IDEM_CALLER` when set, else `service@host:pid` (the program's name
    without its extension, the host name, the process id), printable and cut
    to `MAX_CALLER_BYTES`. The attempt log then names this process, not the
    sidecar's."""
    given = os.environ.get("IDEM_CALLER")
    if given:
        return given
    program = os.path.splitext(os.path.basename(sys.argv[0] if sys.argv else ""))[0]
    if not program or program == "-c":
        program = "python"
    name = f"{program}@{socket.gethostname() or 'unknown'}:{os.getpid()}"
    # Untrusted everywhere it is shown: nothing that moves a cursor.
    name = "".join(c if c.isprintable() else "?" for c in name)
    while len(name.encode("utf-8")) > MAX_CALLER_BYTES:
        name = name[:-1]
    # Stripped after the cut: a cut can leave a space at the end, which the
    # sidecar refuses.
    return name.strip()


class IdemClient:
    """A client of one `idem serve` (one policy, one store).

    `base_url` is where it listens (`http://127.0.0.1:7676`); `token` the
    bearer token it was started with, if any; `timeout` how long one
    request may take, in seconds; `caller` the name `begin` gives the
    sidecar for this process (default `default_caller()`:
    `service@host:pid`), which the attempt log, `idem report` and the
    review console show as who held the record. The client connects
    directly, ignoring `HTTP_PROXY`: the sidecar runs beside the service.
    It holds no state but its settings, so one client may be shared by
    threads.
    """

    def __init__(
        self,
        base_url: str,
        token: Optional[str] = None,
        timeout: float = 30.0,
        caller: Optional[str] = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.timeout = timeout
        self.caller = caller if caller is not None else default_caller()
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def __repr__(self) -> str:
        # Never the token.
        return f"IdemClient({self.base_url!r})"

    def post(self, route: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """`POST route` with a JSON body; the answer's JSON, or the problem
        raised as its exception."""
        data = json.dumps(body, ensure_ascii=False, allow_nan=False).encode("utf-8")
        request = urllib.request.Request(self.base_url + route, data=data, method="POST")
        request.add_header("Content-Type", "application/json")
        request.add_header("Accept", "application/json, application/problem+json")
        if self.token is not None:
            request.add_header("Authorization", f"Bearer {self.token}")
        try:
            with self._opener.open(request, timeout=self.timeout) as response:
                raw = response.read()
        except urllib.error.HTTPError as e:
            raw = e.read()
            retry_after = e.headers.get("Retry-After") if e.headers else None
            try:
                problem = json.loads(raw)
            except ValueError:
                problem = None
            if not isinstance(problem, dict):
                # Not idem's answer (a proxy in the way?): a problem all the
                # same, so callers handle one kind of error.
                problem = {
                    "type": "about:blank",
                    "title": str(e.reason),
                    "status": e.code,
                    "detail": raw.decode("utf-8", "replace")[:500],
                }
            hint = int(retry_after) if retry_after and retry_after.isdigit() else None
            raise problem_error(problem, hint) from None
        except (urllib.error.URLError, HTTPException, OSError) as e:
            raise TransportError(f"POST {self.base_url}{route}: {e}") from e
        try:
            answer = json.loads(raw)
        except ValueError as e:
            raise TransportError(f"POST {self.base_url}{route}: the answer is not JSON") from e
        if not isinstance(answer, dict):
            raise TransportError(f"POST {self.base_url}{route}: the answer is not an object")
        return answer

    def derive(self, operation: Operation) -> Derivation:
        """The operation's key, fingerprint and partition; stores nothing."""
        return Derivation.parse(self.post("/v1/derive", {"operation": operation}))

    def begin(
        self, operation: Operation, run: Optional[Run] = None, *, atomic: bool = False
    ) -> BeginAnswer:
        """Claims the operation's key, or says what a duplicate gets. `run`,
        when given, is set as the operation's `run` member. `atomic=True`
        (a PostgreSQL store only) says the effect commits in the same
        transaction as its end (`idem_client.postgres.complete_in`): should
        the claim expire, the next duplicate knows nothing was done and
        re-executes it instead of sending it to review. The claim is held
        under this client's `caller` name."""
        if run is not None:
            operation = {**operation, "run": run}
        request: dict[str, Any] = {"operation": operation, "caller": self.caller}
        if atomic:
            request["atomic"] = True
        return parse_begin(self.post("/v1/begin", request))

    def complete(self, key: str, fence: int, status: int = 0, body: Body = None) -> Finished:
        """Records the outcome under `fence`: text `body` is stored as text,
        `bytes` as bytes. Sending the same end again is answered as the first."""
        request: dict[str, Any] = {"key": key, "fence": fence, "status": status}
        request.update(_body_members(body))
        return Finished.parse(self.post("/v1/complete", request))

    def fail(
        self,
        key: str,
        fence: int,
        retryable: bool,
        status: Optional[int] = None,
        error: Optional[str] = None,
        body: Body = None,
    ) -> Finished:
        """Records a failure under `fence`: retryable (a later begin may
        re-execute under a higher fence) or permanent (replayed)."""
        request: dict[str, Any] = {"key": key, "fence": fence, "retryable": retryable}
        if status is not None:
            request["status"] = status
        if error is not None:
            request["error"] = error
        request.update(_body_members(body))
        return Finished.parse(self.post("/v1/fail", request))

    def heartbeat(self, key: str, fence: int, lease_ms: int) -> Heartbeat:
        """Extends the claim's lease to the store's now plus `lease_ms` (pass
        back begin's `lease_ms`)."""
        return Heartbeat.parse(
            self.post("/v1/heartbeat", {"key": key, "fence": fence, "lease_ms": lease_ms})
        )

    def resolve(
        self,
        key: str,
        fence: int,
        resolution: Literal["completed", "release", "reject"],
        reason: str,
        by: str,
        status: Optional[int] = None,
        body: Body = None,
        amend: bool = False,
    ) -> Resolved:
        """A person settles a record waiting for review, under the fence
        they saw; with `amend=True`, amends a person's release or rejection
        that was wrong (`fence` is the one that resolution wrote; the log
        keeps both decisions, and `NotAmendable` says why one is refused)."""
        request: dict[str, Any] = {
            "key": key,
            "fence": fence,
            "resolution": resolution,
            "reason": reason,
            "by": by,
        }
        if status is not None:
            request["status"] = status
        if amend:
            request["amend"] = True
        request.update(_body_members(body))
        return Resolved.parse(self.post("/v1/resolve", request))

    def report(
        self,
        since_ms: Optional[int] = None,
        until_ms: Optional[int] = None,
        run_id: Optional[str] = None,
        key: Optional[str] = None,
    ) -> dict[str, Any]:
        """Why it ran twice, in this policy's namespace: what `idem report
        --json` prints (docs/guide/why-did-it-run-twice.md)."""
        given = {"since_ms": since_ms, "until_ms": until_ms, "run_id": run_id, "key": key}
        return self.post("/v1/report", {k: v for k, v in given.items() if v is not None})

    def idempotent(
        self,
        operation: Operation,
        *,
        run: Optional[Run] = None,
        status: int = 0,
        encode: Optional[Callable[[Any], Body]] = None,
        decode: Optional[Callable[[Any], Any]] = None,
        permanent: Iterable[type[BaseException]] = (),
        max_wait: float = 30.0,
        poll_interval: float = 1.0,
        heartbeat_every: Optional[float] = None,
    ) -> Call:
        """A context manager that performs `operation` at most once; see
        `idem_client.Call` for what each argument does."""
        from .idempotent import Call

        return Call(
            self,
            operation,
            run=run,
            status=status,
            encode=encode,
            decode=decode,
            permanent=tuple(permanent),
            max_wait=max_wait,
            poll_interval=poll_interval,
            heartbeat_every=heartbeat_every,
        )
