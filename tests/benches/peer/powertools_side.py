"""The Powertools side of tests/benches/peer/run.sh.

AWS Lambda Powertools for Python's idempotency utility on Redis, doing what
`idem run --worker` does in the bench: one "charge" per line of an operations
file, the charge itself a no-op returning a small dict (as idem's awk worker
answers {"status":0,"body":"ok"}).

    powertools_side.py info  REDIS_URL            # durability settings, one line
    powertools_side.py ping  REDIS_URL            # exit 0 when it answers
    powertools_side.py flush REDIS_URL            # empty the bench's database
    powertools_side.py versions                   # what is compared, one line
    powertools_side.py run   REDIS_URL OPS.jsonl WORKERS fresh|rerun

`run` starts WORKERS processes (forked, so they share the parent's imports),
each with its own RedisCachePersistenceLayer (its own connection pool, one
connection in use) and a static share of the lines (line i goes to process
i mod WORKERS). Each process connects (a PING) and then waits; the clock
starts when all are waiting (they are released together) and stops at the
last process's last operation: process start, imports and connecting are
not timed; reading each line as JSON and every Redis round trip are.

`fresh` first empties the bench's Redis database (REDIS_URL names it, e.g.
redis://127.0.0.1:6379/15), refusing one that holds keys that are not the
bench's. Afterwards `run` checks, untimed, that the body ran once per line
(fresh) or never (rerun: every call a replay), that every call returned the
body's answer, and that Redis holds one COMPLETED record per line; it fails
loudly otherwise. On success it prints the timed seconds on stdout.
"""

from __future__ import annotations

import importlib.metadata
import json
import multiprocessing
import sys
import time
import traceback
import warnings

# Outside Lambda there is no context to register, so Powertools warns (once
# per process) that it cannot set an in-progress expiry: the records of a
# call in progress then fail closed until they expire. The persistence layer
# is deprecated in favour of its alias CachePersistenceLayer (the same class).
warnings.filterwarnings("ignore", message="Couldn't determine the remaining time")
warnings.filterwarnings("ignore", category=DeprecationWarning)

import redis  # noqa: E402
from aws_lambda_powertools.utilities.idempotency import (  # noqa: E402
    IdempotencyConfig,
    idempotent_function,
)
from aws_lambda_powertools.utilities.idempotency.persistence.redis import (  # noqa: E402
    RedisCachePersistenceLayer,
)

# Every key the bench writes starts with this (key_prefix#md5).
KEY_PREFIX = "idem-peer-bench.charge"
# The key: what idem's billing-charge policy keys on (tenant, customer,
# billing period, invoice).
#
# No payload validation (payload_validation_jmespath), although billing-charge
# fingerprints amount and currency so that idem refuses a changed amount under
# the same key: in Powertools for Python 3.37.0 the Redis layer's
# _update_record rewrites the completed record without its "validation" hash,
# so every replay of an unchanged operation then fails with
# IdempotencyValidationError (tried here; the TypeScript port fixed the same
# bug as powertools-lambda-typescript#5705). Powertools thus does less per
# operation here than idem does.
EVENT_KEY = "[tenant, fields.customer, fields.billing_period, fields.invoice_id]"
# billing-charge keeps a record 400 days (retention_s); so does Redis here.
EXPIRES_AFTER_S = 400 * 24 * 3600
ANSWER = {"status": 0, "body": "ok"}


def config() -> IdempotencyConfig:
    return IdempotencyConfig(
        event_key_jmespath=EVENT_KEY,
        raise_on_no_idempotency_key=True,
        expires_after_seconds=EXPIRES_AFTER_S,
    )


def die(message: str) -> None:
    print(f"powertools_side: {message}", file=sys.stderr)
    sys.exit(1)


def worker(index, lines, url, ready, go, results) -> None:
    """One process: its own persistence layer, its share of the lines."""
    readied = False
    try:
        store = RedisCachePersistenceLayer(url=url)
        executed = 0

        @idempotent_function(
            data_keyword_argument="op",
            config=config(),
            persistence_store=store,
            key_prefix=KEY_PREFIX,
        )
        def charge(op: dict) -> dict:
            # The effect: a no-op that answers, counted to prove exactly once.
            nonlocal executed
            executed += 1
            return {"status": 0, "body": "ok"}

        store.client.ping()  # connect now, untimed
        ready.put(None)
        readied = True
        go.wait()
        wrong = 0
        for line in lines:
            if charge(op=json.loads(line)) != ANSWER:
                wrong += 1
        ended = time.monotonic()
        results.put((index, ended, executed, len(lines), wrong, None))
    except BaseException:  # reported to the parent, which fails loudly
        failure = traceback.format_exc()
        if readied:
            results.put((index, time.monotonic(), 0, 0, 0, failure))
        else:
            ready.put(failure)


def client(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, decode_responses=True)


def flush(url: str) -> None:
    """Empties the bench's database, refusing one with keys not the bench's."""
    r = client(url)
    foreign = [k for k in r.scan_iter(count=1000) if not k.startswith(KEY_PREFIX)]
    if foreign:
        die(
            f"the Redis database {url} holds {len(foreign)} key(s) that are not the "
            f"bench's (e.g. {foreign[0]!r}); point REDIS_DB at an empty database"
        )
    r.flushdb()


def check_records(url: str, n: int) -> None:
    """One COMPLETED record per operation, and nothing else."""
    r = client(url)
    keys = list(r.scan_iter(count=1000))
    if len(keys) != n:
        die(f"Redis holds {len(keys)} keys after the run, expected {n} records")
    pipe = r.pipeline(transaction=False)
    for k in keys:
        pipe.get(k)
    not_done = [k for k, v in zip(keys, pipe.execute()) if json.loads(v).get("status") != "COMPLETED"]
    if not_done:
        die(f"{len(not_done)} records are not COMPLETED after the run (e.g. {not_done[0]})")


def run(url: str, ops_path: str, workers: int, phase: str) -> None:
    with open(ops_path, encoding="utf-8") as f:
        lines = [line for line in f.read().splitlines() if line.strip()]
    n = len(lines)
    if phase == "fresh":
        flush(url)
    elif phase != "rerun":
        die(f"phase must be fresh or rerun, not {phase!r}")
    ctx = multiprocessing.get_context("fork")
    ready, results, go = ctx.Queue(), ctx.Queue(), ctx.Event()
    procs = [
        ctx.Process(target=worker, args=(i, lines[i::workers], url, ready, go, results))
        for i in range(workers)
    ]
    for p in procs:
        p.start()
    for _ in procs:
        failure = ready.get(timeout=120)
        if failure:
            for p in procs:
                p.terminate()
            die("a worker could not start:\n" + failure)
    started = time.monotonic()
    go.set()
    got = [results.get(timeout=3600) for _ in procs]
    for p in procs:
        p.join()
    failures = [g[5] for g in got if g[5]]
    if failures:
        die("a worker failed:\n" + failures[0])
    seconds = max(g[1] for g in got) - started
    executed = sum(g[2] for g in got)
    calls = sum(g[3] for g in got)
    wrong = sum(g[4] for g in got)
    if calls != n:
        die(f"the workers made {calls} calls for {n} operations")
    if wrong:
        die(f"{wrong} calls returned something else than {ANSWER}")
    expected = n if phase == "fresh" else 0
    if executed != expected:
        die(
            f"{phase}: the body ran {executed} times for {n} operations "
            f"(expected {expected}: {'each once' if phase == 'fresh' else 'all replays'})"
        )
    check_records(url, n)
    print(f"{seconds:.6f}")


def info(url: str) -> None:
    r = client(url)
    version = r.info("server").get("redis_version", "?")
    try:
        conf = {}
        for name in ("appendonly", "appendfsync", "save"):
            conf.update(r.config_get(name))
        save = conf.get("save") or '""'
        text = f"appendonly {conf.get('appendonly')}, appendfsync {conf.get('appendfsync')}, save {save}"
    except redis.ResponseError as e:  # CONFIG disabled (a managed Redis)
        text = f"CONFIG GET refused ({e})"
    print(f"Redis {version}: {text}")


def main(argv: list[str]) -> None:
    if len(argv) >= 2 and argv[0] == "info":
        info(argv[1])
    elif argv == ["versions"]:
        v = importlib.metadata.version
        print(
            f"aws-lambda-powertools {v('aws-lambda-powertools')} (RedisCachePersistenceLayer), "
            f"redis-py {v('redis')}, Python {sys.version.split()[0]}"
        )
    elif len(argv) == 2 and argv[0] == "flush":
        flush(argv[1])
    elif len(argv) >= 2 and argv[0] == "ping":
        try:
            client(argv[1]).ping()
        except redis.RedisError:
            sys.exit(1)
    elif len(argv) == 5 and argv[0] == "run":
        run(argv[1], argv[2], int(argv[3]), argv[4])
    else:
        die("usage: versions | info URL | ping URL | flush URL | run URL OPS.jsonl WORKERS fresh|rerun")


if __name__ == "__main__":
    main(sys.argv[1:])
