"""The routes, one method each, and the problems as typed exceptions."""

from __future__ import annotations

import pytest
from conftest import TOKEN, skip_or_fail

from idem_client import (
    BadRequest,
    Conflict,
    ConflictAnswer,
    ExecuteAnswer,
    IdemClient,
    InProgressAnswer,
    NotAmendable,
    NotInProgress,
    PolicyRefused,
    ReplayAnswer,
    StaleFence,
    TransportError,
    Unauthorized,
    UnknownKey,
)


def test_derive_names_the_key_and_stores_nothing(client, op):
    derived = client.derive(op("derive"))
    assert derived.namespace == "billing"
    assert len(derived.key) == 64 and int(derived.key, 16) >= 0
    assert derived.partition == "c-py"
    assert derived.policy.startswith("sha256:")
    # Nothing was stored: the first begin still executes, under that key.
    begun = client.begin(op("derive"))
    assert isinstance(begun, ExecuteAnswer), begun
    assert begun.key == derived.key
    assert begun.attempt == 1 and not begun.take_over


def test_begin_complete_then_begin_replays(client, op):
    begun = client.begin(op("flow"))
    assert isinstance(begun, ExecuteAnswer), begun
    # While it runs, a duplicate is told to wait.
    busy = client.begin(op("flow"))
    assert isinstance(busy, InProgressAnswer), busy
    assert busy.retry_after_ms is not None and busy.retry_after_ms > 0
    beat = client.heartbeat(begun.key, begun.fence, begun.lease_ms)
    assert beat.lease_until_ms >= begun.lease_until_ms
    done = client.complete(begun.key, begun.fence, body="receipt 1")
    assert done.state == "completed" and done.fence == begun.fence
    # The same end again (its answer lost) is answered as the first was.
    assert client.complete(begun.key, begun.fence, body="receipt 1") == done
    replay = client.begin(op("flow"))
    assert isinstance(replay, ReplayAnswer), replay
    assert replay.state == "completed"
    assert replay.outcome.status == 0 and replay.outcome.body == "receipt 1"
    # Another end under that fence is refused, typed, with what is stored.
    with pytest.raises(NotInProgress) as refused:
        client.complete(begun.key, begun.fence, body="receipt 2")
    assert refused.value.status == 409 and isinstance(refused.value, Conflict)
    assert refused.value.state == "completed"
    # The same invoice for another amount: the key was used for another
    # operation.
    other = client.begin(op("flow", amount="250"))
    assert isinstance(other, ConflictAnswer), other


def test_bytes_are_stored_as_bytes(client, op):
    begun = client.begin(op("bytes"))
    assert isinstance(begun, ExecuteAnswer), begun
    client.complete(begun.key, begun.fence, status=7, body=b"\xff\x00receipt")
    replay = client.begin(op("bytes"))
    assert isinstance(replay, ReplayAnswer), replay
    assert replay.outcome.body is None and replay.outcome.body_base64 is not None
    assert replay.outcome.bytes() == b"\xff\x00receipt" and replay.outcome.status == 7


def test_a_stale_fence_is_refused_typed(client, op):
    first = client.begin(op("stale"))
    assert isinstance(first, ExecuteAnswer), first
    failed = client.fail(first.key, first.fence, retryable=True, error="provider timeout")
    assert failed.state == "failed-retryable"
    second = client.begin(op("stale"))
    assert isinstance(second, ExecuteAnswer), second
    assert second.fence > first.fence and second.take_over and second.attempt == 2
    # The first holder comes back late: its fence no longer writes.
    with pytest.raises(StaleFence) as stale:
        client.complete(first.key, first.fence, body="late")
    e = stale.value
    assert e.status == 409 and e.slug == "stale-fence"
    assert e.fence == first.fence and e.current_fence == second.fence
    assert f"fence {first.fence}" in e.detail and e.title
    with pytest.raises(StaleFence):
        client.heartbeat(first.key, first.fence, first.lease_ms)
    # The current holder's completion stands.
    assert client.complete(second.key, second.fence, body="ok").state == "completed"


def test_a_permanent_failure_is_replayed(client, op):
    begun = client.begin(op("declined"))
    assert isinstance(begun, ExecuteAnswer), begun
    done = client.fail(begun.key, begun.fence, retryable=False, status=2, error="card declined")
    assert done.state == "failed-permanent"
    replay = client.begin(op("declined"))
    assert isinstance(replay, ReplayAnswer), replay
    assert replay.state == "failed-permanent"
    assert replay.outcome.status == 2 and replay.outcome.error == "card declined"


def test_amending_a_holders_own_end_is_refused_typed(client, op):
    begun = client.begin(op("amend-declined"))
    assert isinstance(begun, ExecuteAnswer), begun
    done = client.fail(begun.key, begun.fence, retryable=False, status=2, error="card declined")
    with pytest.raises(NotAmendable) as refused:
        client.resolve(
            begun.key, done.fence, "completed", reason="charged after all", by="ops", amend=True
        )
    assert refused.value.status == 409 and refused.value.state == "failed-permanent"
    assert "a holder's end wrote it" in refused.value.detail


def test_the_token_is_required(server_url, op):
    if TOKEN is None:
        skip_or_fail("IDEM_SERVE_TOKEN is not set: start idem serve with a token")
    for token in (None, "not-" + TOKEN):
        with pytest.raises(Unauthorized) as refused:
            IdemClient(server_url, token=token).derive(op("token"))
        assert refused.value.status == 401 and refused.value.slug == "unauthorized"
        assert refused.value.detail
    # The token is never shown.
    assert TOKEN not in repr(IdemClient(server_url, token=TOKEN))


def test_a_policy_refusal_is_typed(client, op):
    refund = {**op("refund"), "kind": "refund"}
    with pytest.raises(PolicyRefused) as refused:
        client.begin(refund)
    assert refused.value.status == 422 and refused.value.code == "unsupported-kind"
    no_currency = op("no-currency")
    del no_currency["fields"]["currency"]
    with pytest.raises(PolicyRefused) as refused:
        client.derive(no_currency)
    assert refused.value.code == "missing-field" and refused.value.field == "currency"


def test_other_problems_are_typed(client, op):
    unknown = "0" * 64
    with pytest.raises(UnknownKey) as missing:
        client.complete(unknown, 1, body="x")
    assert missing.value.status == 404 and missing.value.key == unknown
    with pytest.raises(BadRequest) as bad:
        client.heartbeat("not-a-key", 1, 3000)
    assert bad.value.status == 400 and bad.value.member == "key"


def test_an_unreachable_server_is_a_transport_error(op):
    # Port 9 (discard) on loopback: nothing listens there in a test machine.
    with pytest.raises(TransportError):
        IdemClient("http://127.0.0.1:9", timeout=5).derive(op("nowhere"))


def test_the_report_sees_the_replay(client, op):
    begun = client.begin(op("report"))
    assert isinstance(begun, ExecuteAnswer), begun
    client.complete(begun.key, begun.fence, body="r")
    assert isinstance(client.begin(op("report")), ReplayAnswer)
    report = client.report(key=begun.key)
    assert report["namespace"] == "billing" and report["keys"] == 1
    assert report["entries"] >= 3  # executed, completed, replayed


def test_begin_names_its_caller_and_the_report_shows_it(server_url, op):
    named = IdemClient(server_url, token=TOKEN, caller="pytest-billing@ci:7")
    begun = named.begin(op("named"))
    assert isinstance(begun, ExecuteAnswer), begun
    named.complete(begun.key, begun.fence, body="r")
    assert isinstance(named.begin(op("named")), ReplayAnswer)
    report = named.report(key=begun.key)
    (dup,) = report["duplicates"]
    assert dup["cause"] == "client-retry", dup
    assert dup["runs"] == ["pytest-billing@ci:7"], dup
    assert "pytest-billing@ci:7 asked again" in dup["explanation"], dup


def test_the_default_caller_is_service_host_and_pid(client):
    import os
    import socket

    assert client.caller.endswith(f"@{socket.gethostname()}:{os.getpid()}") or os.environ.get(
        "IDEM_CALLER"
    )
    assert len(client.caller.encode("utf-8")) <= 128


def test_a_caller_name_with_a_control_character_is_refused(server_url, op):
    bad = IdemClient(server_url, token=TOKEN, caller="evil\x1b[2J")
    with pytest.raises(BadRequest) as refused:
        bad.begin(op("bad-caller"))
    assert refused.value.status == 400 and refused.value.member == "caller"
