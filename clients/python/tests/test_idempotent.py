"""The helpers: a body runs at most once per operation, its result is
stored and replayed, a failure is recorded, a long body keeps its claim."""

from __future__ import annotations

import threading
import time

import pytest
from conftest import skip_or_fail

from idem_client import (
    ExecuteAnswer,
    FailedPermanently,
    InProgress,
    InProgressAnswer,
    OperationConflict,
    Permanent,
    PolicyRefused,
    ReplayAnswer,
    current_claim,
    idempotent,
)


class Counter:
    """How often a body ran, from any thread."""

    def __init__(self) -> None:
        self.n = 0
        self._lock = threading.Lock()

    def bump(self) -> int:
        with self._lock:
            self.n += 1
            return self.n


def test_first_call_executes_and_a_second_replays(client, op):
    ran = Counter()
    with client.idempotent(op("cm")) as call:
        assert call.should_run and not call.replayed
        assert current_claim() is call.claim
        ran.bump()
        call.result = {"receipt": "r-1", "amount": 100, "lines": ("a", "b")}
    assert current_claim() is None
    with client.idempotent(op("cm")) as again:
        assert again.replayed and not again.should_run
        ran.bump()  # a block always runs: should_run tells it not to charge
    assert again.key == call.key
    # JSON: the tuple comes back as a list, everything else equal.
    assert again.result == {"receipt": "r-1", "amount": 100, "lines": ["a", "b"]}
    # What was stored is the result as compact JSON text, with status 0.
    replay = client.begin(op("cm"))
    assert isinstance(replay, ReplayAnswer), replay
    assert replay.outcome.status == 0
    assert replay.outcome.body == '{"receipt":"r-1","amount":100,"lines":["a","b"]}'
    assert ran.n == 2


def test_the_decorator_runs_the_body_once(client, op):
    ran = Counter()
    seen = []

    @idempotent(client, operation=lambda invoice, amount: op(invoice, amount))
    def charge(invoice: str, amount: str) -> dict:
        claim = current_claim()
        assert claim is not None
        seen.append((claim.key, claim.fence))
        return {"receipt": f"{invoice}:{amount}:{ran.bump()}"}

    first = charge("deco", "100")
    second = charge("deco", "100")
    assert first == second == {"receipt": "deco:100:1"}
    assert ran.n == 1
    assert len(seen) == 1
    assert seen[0][0] == client.derive(op("deco", "100")).key and seen[0][1] > 0
    # Another invoice is another operation: it runs.
    assert charge("deco-2", "100") == {"receipt": "deco-2:100:2"}
    # The same invoice for another amount is refused, without running.
    with pytest.raises(OperationConflict):
        charge("deco", "250")
    assert ran.n == 2


def test_an_exception_fails_and_a_later_call_executes_again(client, op):
    ran = Counter()

    @idempotent(client, operation=lambda: op("flaky"))
    def flaky() -> str:
        if ran.bump() == 1:
            raise TimeoutError("the provider timed out")
        claim = current_claim()
        assert claim is not None and claim.take_over and claim.attempt == 2
        return "charged"

    with pytest.raises(TimeoutError):
        flaky()
    # Recorded as a retryable failure, with the exception as its error.
    assert flaky() == "charged"
    assert flaky() == "charged"
    assert ran.n == 2


def test_a_permanent_exception_is_replayed_without_running(client, op):
    ran = Counter()

    class Declined(Exception):
        pass

    @idempotent(client, operation=lambda: op("declined-deco"), permanent=[Declined])
    def charge() -> str:
        ran.bump()
        raise Declined("card declined")

    with pytest.raises(Declined):
        charge()
    with pytest.raises(FailedPermanently) as replayed:
        charge()
    assert ran.n == 1
    assert replayed.value.outcome.error == "Declined: card declined"
    # `Permanent` itself needs no listing.
    with pytest.raises(Permanent):
        with client.idempotent(op("declined-cm")):
            raise Permanent("no such customer")
    with pytest.raises(FailedPermanently):
        with client.idempotent(op("declined-cm")):
            ran.bump()
    assert ran.n == 1


def test_a_policy_refusal_runs_nothing(client, op):
    ran = Counter()
    with pytest.raises(PolicyRefused) as refused:
        with client.idempotent({**op("refused"), "kind": "refund"}):
            ran.bump()
    assert refused.value.code == "unsupported-kind"
    assert ran.n == 0


def test_heartbeats_keep_a_body_longer_than_its_lease(client, op):
    lease_ms = client.derive(op("long")).lease_ms
    if lease_ms > 10_000:
        skip_or_fail(f"the lease is {lease_ms} ms: start idem serve with `--lease 3s`")
    probes = []
    with client.idempotent(op("long")) as call:
        assert call.should_run
        # Past the lease: without a heartbeat the claim would have lapsed,
        # and this begin would send the record to review (`rejected`).
        time.sleep(lease_ms * 1.5 / 1000)
        probes.append(client.begin(op("long")))
        call.result = "done"
    assert isinstance(probes[0], InProgressAnswer), probes[0]
    # The completion under the fence was accepted: the record replays.
    replay = client.begin(op("long"))
    assert isinstance(replay, ReplayAnswer), replay
    assert replay.fence == call.fence and replay.outcome.body == '"done"'


def test_in_progress_waits_up_to_its_bound(client, op):
    held = client.begin(op("held"))
    assert isinstance(held, ExecuteAnswer), held
    ran = Counter()
    with pytest.raises(InProgress) as busy:
        with client.idempotent(op("held"), max_wait=0):
            ran.bump()
    assert busy.value.key == held.key and busy.value.retry_after_ms
    assert ran.n == 0
    # Once the holder completes, a waiting call replays its result.
    client.complete(held.key, held.fence, body='"by the holder"')
    with client.idempotent(op("held"), max_wait=0) as call:
        assert call.replayed
    assert call.result == "by the holder" and ran.n == 0


def test_two_threads_one_execution(client, op):
    ran = Counter()
    start = threading.Barrier(2)
    inside = threading.Event()

    @idempotent(client, operation=lambda: op("race"), poll_interval=0.1)
    def charge() -> str:
        inside.set()
        # Long enough for the other thread to find the claim held, which
        # is what it must wait out; not what the assertions rest on.
        time.sleep(0.5)
        return f"charged {ran.bump()}"

    results: list = [None, None]

    def worker(i: int) -> None:
        start.wait()
        try:
            results[i] = charge()
        except BaseException as e:  # shown by the assertion below
            results[i] = e

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == ["charged 1", "charged 1"], results
    assert ran.n == 1 and inside.is_set()
