#!/bin/sh
# The peer bench: `idem run` against what a team would otherwise pick, AWS
# Lambda Powertools for Python's idempotency utility on Redis, over the same
# operations, in one run, printing idem ÷ Powertools throughput ratios.
#
# Usage: [ROUNDS=3] [WORKERS="1 8 32"] tests/benches/peer/run.sh IDEM POLICY.wasm [OPS]
#   IDEM    a release `idem` binary; POLICY the billing-charge policy. The
#           simplest way to both: `cargo xtask build`, then
#           tests/benches/peer/run.sh target/release/idem target/policies/billing-charge.wasm
#           (a debug try: `cargo build -p idem-cli`, and the policy the tests'
#           build leaves in <target>/debug/build/idem-tests-*/out/policies/, or
#           `idem build guest/policies/billing-charge`, which prints its path).
#   OPS     operations per run (default 5000).
# Environment:
#   ROUNDS (3), WORKERS ("1 8 32"): each round runs every worker count.
#   REDIS_URL (redis://127.0.0.1:6379) and REDIS_DB (15): Powertools' Redis;
#     the bench uses database REDIS_DB only, empties it before each fresh
#     run, and refuses one holding keys that are not the bench's.
#   IDEM_PEER_POSTGRES_URL (postgres://postgres@127.0.0.1:5432/test; "none"
#     skips): idem's PostgreSQL side, in the schema idem_peer_bench (dropped
#     and migrated again before each fresh run, dropped at the end); needs
#     psql; skipped with a line saying why when unreachable.
#   REDIS_FSYNC_ALWAYS=1: also Powertools on a private
#     `redis-server --appendonly yes --appendfsync always` (port
#     REDIS_FSYNC_PORT, 6390; its file in the temp dir), started and stopped
#     here: the machine's Redis is never reconfigured.
#   BENCH_TMPDIR (TMPDIR or /tmp): where the SQLite store (and that AOF) go;
#     its file system is printed, since tmpfs would make fsync free.
#   PYTHON (python3, 3.11+, as redis-py 8.2 needs): makes the venv, once, in
#     ${XDG_CACHE_HOME:-~/.cache}/idem-peer-bench/venv, from requirements.txt
#     beside this script (pinned; made again when that file changes).
#   RESULTS_OUT=FILE keeps the raw timings ("ROUND WORKERS SIDE PHASE SECONDS").
#
# What runs: OPS "charge" operations, made as tests/benches/run-cli.sh makes
# them, each with its own key (customer, billing period, invoice). For each
# round and worker count W, interleaved: Powertools, idem on SQLite, idem on
# PostgreSQL; each fresh (an empty store) and then again over the same
# operations (a re-run: all replays). The effect is a no-op answering "ok":
# for idem the awk worker of run-cli.sh (`idem run --worker --concurrency W`,
# W awk processes fed over pipes), for Powertools the body of a function under
# @idempotent_function run by W processes, each with its own
# RedisCachePersistenceLayer, splitting the operations (powertools_side.py).
# Powertools keys on the same fields as the policy, keeps records as long
# (400 days), and has no payload validation (broken on Redis in 3.37.0: see
# powertools_side.py), where idem checks each replay's fingerprint.
#
# Timing: Powertools from the moment all W processes have started, imported
# and connected (then released together) to the last one's last operation;
# idem from the shell around the whole `idem run` command, so its own start
# (loading the compiled policy, reading and deriving the file, opening the
# store, starting W workers) and exit are counted against it; the cost of a
# 1-operation run is printed to show how much that weighs. Stores are created
# (migrated) untimed before each fresh run, as a deployment would have them.
# `idem run --json` (so no "why" lines on a re-run); --claim-batch and
# --finish-batch at their defaults.
#
# Honesty checks, untimed, failing the bench: after a fresh run every
# operation executed exactly once (idem: its summary says executed OPS and
# nothing else, and its awk workers' own count of the requests they answered,
# written at their exit, adds up to OPS; Powertools: the bodies' count, every
# answer, one COMPLETED record per operation in Redis), after a re-run none
# did (idem: replayed OPS, no worker answered anything; Powertools: no body
# ran, every call returned the stored answer).
#
# Printed: durability of each side (Redis' appendonly/appendfsync/save, idem's
# SQLite WAL + synchronous, PostgreSQL's synchronous_commit and fsync), then a
# table: rows (idem store, Powertools' Redis, W), columns the idem ÷ Powertools
# ops/s ratio of fresh and of re-run runs (median of the per-round ratios, the
# rounds in brackets) and each side's median ops/s.
set -eu
if [ $# -lt 2 ] || [ $# -gt 3 ]; then
  echo "usage: [ROUNDS=3] [WORKERS=\"1 8 32\"] $0 IDEM POLICY.wasm [OPS]" >&2
  exit 2
fi
IDEM=$1 POLICY=$2 N=${3:-5000}
ROUNDS=${ROUNDS:-3} WORKERS=${WORKERS:-1 8 32}
REDIS_URL=${REDIS_URL:-redis://127.0.0.1:6379} REDIS_DB=${REDIS_DB:-15}
PG_URL=${IDEM_PEER_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/test}
PG_SCHEMA=idem_peer_bench
FSYNC_PORT=${REDIS_FSYNC_PORT:-6390}
HERE=$(cd "$(dirname "$0")" && pwd)
[ -x "$IDEM" ] || { echo "$IDEM is not an executable idem binary" >&2; exit 2; }
[ -f "$POLICY" ] || { echo "no policy at $POLICY" >&2; exit 2; }

DIR=$(mktemp -d "${BENCH_TMPDIR:-${TMPDIR:-/tmp}}/idem-peer.XXXXXX")
REDIS_PID= PG_OK= PT_URL=
cleanup() {
  if [ -n "$PT_URL" ]; then pt flush "$PT_URL" || true; fi
  if [ -n "$REDIS_PID" ]; then kill "$REDIS_PID" 2>/dev/null || true; wait "$REDIS_PID" 2>/dev/null || true; fi
  if [ -n "$PG_OK" ]; then pg_drop || true; fi
  rm -rf "$DIR"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
export IDEM_CACHE_DIR="$DIR/cache"

# The Powertools venv, made once and kept.
VENV=${XDG_CACHE_HOME:-$HOME/.cache}/idem-peer-bench/venv
if ! cmp -s "$HERE/requirements.txt" "$VENV/requirements.txt"; then
  echo "making the Powertools venv in $VENV (once)" >&2
  rm -rf "$VENV"
  mkdir -p "$(dirname "$VENV")"
  "${PYTHON:-python3}" -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check -r "$HERE/requirements.txt"
  cp "$HERE/requirements.txt" "$VENV/requirements.txt"
fi
PY=$VENV/bin/python
pt() { "$PY" "$HERE/powertools_side.py" "$@"; }

# As tests/benches/run-cli.sh makes them.
ops() {
  awk -v n="$1" 'BEGIN { for (i = 0; i < n; i++)
    printf "{\"kind\":\"charge\",\"tenant\":\"acme\",\"fields\":{\"customer\":\"c%d\",\"billing_period\":\"2026-11\",\"invoice_id\":\"i%d\",\"amount\":\"%d\",\"currency\":\"EUR\"}}\n", i, i, i % 1000 + 1 }' > "$2"
}
# run-cli.sh's worker, and at its exit the number of effects it performed
# (requests it answered) appended to the file $effects: the count the checks
# compare with idem's summary.
WORKER='BEGIN { print "{\"ready\":true}"; fflush() } { print "{\"status\":0,\"body\":\"ok\"}"; fflush() } END { print NR >> effects }'
now() { date +%s.%N; }
elapsed() { echo "$1 $2" | awk '{ printf "%.6f", $2 - $1 }'; }
rate() { echo "$1" | awk -v n="$N" '{ printf "%.0f", n / $1 }'; }

# Redis database REDIS_DB of a server URL (a database already in it replaced).
redis_db() {
  u=${1%/}
  case $u in redis://*/* | rediss://*/*) u=${u%/*} ;; esac
  echo "$u/$REDIS_DB"
}

# PostgreSQL: idem's URL names its schema; psql gets the plain URL.
case $PG_URL in *\?*) IDEM_PG="$PG_URL&idem_schema=$PG_SCHEMA" ;; *) IDEM_PG="$PG_URL?idem_schema=$PG_SCHEMA" ;; esac
psql_q() { PGCONNECT_TIMEOUT=5 PGOPTIONS='-c client_min_messages=warning' psql "$PG_URL" -X -v ON_ERROR_STOP=1 -Atqc "$1"; }
pg_drop() { psql_q "DROP SCHEMA IF EXISTS $PG_SCHEMA CASCADE"; }
PG_NOTE=
if [ "$PG_URL" = none ]; then
  PG_NOTE="skipped: IDEM_PEER_POSTGRES_URL=none"
elif ! command -v psql >/dev/null; then
  PG_NOTE="skipped: psql is not installed (it drops the bench's schema between runs)"
elif ! psql_q 'select 1' >/dev/null 2>"$DIR/psql.err"; then
  PG_NOTE="skipped: $PG_URL is unreachable ($(head -n 1 "$DIR/psql.err"))"
else
  PG_OK=1
fi

# Fresh stores, migrated untimed.
fresh_sqlite() { rm -f "$DIR"/store.db*; "$IDEM" migrate --store "sqlite:$DIR/store.db" >/dev/null; }
fresh_pg() { pg_drop; "$IDEM" migrate --store "$IDEM_PG" >/dev/null; }

RESULTS=$DIR/results
: > "$RESULTS"
# idem_run STORE_URL W fresh|rerun SIDE ROUND [OPS_FILE [COUNT]]: times one idem run and checks it.
idem_run() {
  file=${6:-$DIR/ops.jsonl} count=${7:-$N}
  rm -f "$DIR/effects"
  t0=$(now)
  if ! "$IDEM" run --policy "$POLICY" --store "$1" --ops "$file" --concurrency "$2" --json \
    --worker -- awk -v effects="$DIR/effects" "$WORKER" > "$DIR/summary" 2> "$DIR/idem.err"; then
    cat "$DIR/summary" "$DIR/idem.err" >&2
    echo "idem run ($4, W=$2, $3) failed" >&2
    exit 1
  fi
  t1=$(now)
  "$PY" "$HERE/report.py" check-idem "$DIR/summary" "$DIR/effects" "$count" "$3"
  secs=$(elapsed "$t0" "$t1")
  [ -z "$5" ] || echo "$5 $2 $4 $3 $secs" >> "$RESULTS"
}
# pt_run REDIS_URL W fresh|rerun SIDE ROUND: the driver times and checks itself.
pt_run() {
  secs=$(pt run "$1" "$DIR/ops.jsonl" "$2" "$3")
  echo "$5 $2 $4 $3 $secs" >> "$RESULTS"
}

# The private fsync-always Redis.
FSYNC_URL= FSYNC_NOTE=
if [ "${REDIS_FSYNC_ALWAYS:-0}" = 1 ]; then
  if ! command -v redis-server >/dev/null; then
    FSYNC_NOTE="REDIS_FSYNC_ALWAYS=1 skipped: redis-server is not installed"
  elif pt ping "redis://127.0.0.1:$FSYNC_PORT"; then
    echo "something already answers on 127.0.0.1:$FSYNC_PORT; set REDIS_FSYNC_PORT to a free port" >&2
    exit 1
  else
    mkdir "$DIR/redis"
    redis-server --port "$FSYNC_PORT" --bind 127.0.0.1 --appendonly yes --appendfsync always \
      --save '' --dir "$DIR/redis" --logfile "$DIR/redis/log" --daemonize no &
    REDIS_PID=$!
    tries=0
    until pt ping "redis://127.0.0.1:$FSYNC_PORT"; do
      tries=$((tries + 1))
      if [ "$tries" -ge 100 ] || ! kill -0 "$REDIS_PID" 2>/dev/null; then
        cat "$DIR/redis/log" >&2 || true
        echo "the private redis-server on port $FSYNC_PORT did not start" >&2
        exit 1
      fi
      sleep 0.1
    done
    FSYNC_URL=$(redis_db "redis://127.0.0.1:$FSYNC_PORT")
  fi
fi
PT_URL=$(redis_db "$REDIS_URL")
pt ping "$PT_URL" || { echo "Redis does not answer at $PT_URL" >&2; exit 1; }

# Warm up (untimed, checked): fills idem's compiled-policy cache, and shows
# both sides work before anything is timed; then idem's own start and exit.
WARM=$((N < 200 ? N : 200))
ops "$WARM" "$DIR/ops.jsonl"
pt run "$PT_URL" "$DIR/ops.jsonl" 1 fresh > /dev/null
pt run "$PT_URL" "$DIR/ops.jsonl" 1 rerun > /dev/null
fresh_sqlite
idem_run "sqlite:$DIR/store.db" 1 fresh warmup "" "$DIR/ops.jsonl" "$WARM"
idem_run "sqlite:$DIR/store.db" 1 rerun warmup "" "$DIR/ops.jsonl" "$WARM"
ops 1 "$DIR/one.jsonl"
START=
for i in 1 2 3; do
  fresh_sqlite
  idem_run "sqlite:$DIR/store.db" 1 fresh start "" "$DIR/one.jsonl" 1
  START="$START $secs"
done
START_MS=$(echo "$START" | tr ' ' '\n' | sort -n | awk 'NF { v[++n] = $1 } END { printf "%.0f", v[int((n + 1) / 2)] * 1000 }')

# The header: what is compared, and how durable each side is.
echo "peer bench: idem vs Powertools idempotency on Redis, $N operations a run, $ROUNDS round(s), W = $WORKERS"
echo "machine:    $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg), temp files on $(stat -f -c %T "$DIR") ($DIR)"
echo "idem:       $("$IDEM" --version), policy $POLICY"
echo "Powertools: $(pt versions)"
echo "durability:"
echo "  Powertools on $PT_URL: $(pt info "$PT_URL")"
[ -z "$FSYNC_URL" ] || echo "  Powertools on $FSYNC_URL (private): $(pt info "$FSYNC_URL"), AOF on $(stat -f -c %T "$DIR/redis")"
[ -z "$FSYNC_NOTE" ] || echo "  $FSYNC_NOTE"
fresh_sqlite
JOURNAL=$("$PY" -c 'import sqlite3, sys; print(sqlite3.connect(sys.argv[1]).execute("pragma journal_mode").fetchone()[0])' "$DIR/store.db")
echo "  idem on SQLite: journal_mode $JOURNAL, synchronous=FULL (idem's default, the URL sets none: every commit fsynced), on $(stat -f -c %T "$DIR")"
if [ -n "$PG_OK" ]; then
  echo "  idem on PostgreSQL: $(psql_q 'SHOW server_version' | cut -d' ' -f1), synchronous_commit $(psql_q 'SHOW synchronous_commit'), fsync $(psql_q 'SHOW fsync') ($PG_URL, schema $PG_SCHEMA)"
else
  echo "  idem on PostgreSQL: $PG_NOTE"
fi
echo "timing:     Powertools from all W processes started, imported and connected to the last operation's end;"
echo "            idem the whole \`idem run\` command, its own start and exit included (a 1-operation run takes ${START_MS} ms here)"
echo

ops "$N" "$DIR/ops.jsonl"
r=1
while [ "$r" -le "$ROUNDS" ]; do
  for w in $WORKERS; do
    line="round $r, W=$w:"
    pt_run "$PT_URL" "$w" fresh powertools "$r"
    pt_run "$PT_URL" "$w" rerun powertools "$r"
    line="$line powertools $(rate "$(grep "^$r $w powertools fresh " "$RESULTS" | cut -d' ' -f5)")/$(rate "$secs")"
    if [ -n "$FSYNC_URL" ]; then
      pt_run "$FSYNC_URL" "$w" fresh powertools-fsync "$r"
      pt_run "$FSYNC_URL" "$w" rerun powertools-fsync "$r"
      line="$line, powertools-fsync $(rate "$(grep "^$r $w powertools-fsync fresh " "$RESULTS" | cut -d' ' -f5)")/$(rate "$secs")"
    fi
    fresh_sqlite
    idem_run "sqlite:$DIR/store.db" "$w" fresh idem-sqlite "$r"
    idem_run "sqlite:$DIR/store.db" "$w" rerun idem-sqlite "$r"
    line="$line, idem sqlite $(rate "$(grep "^$r $w idem-sqlite fresh " "$RESULTS" | cut -d' ' -f5)")/$(rate "$secs")"
    if [ -n "$PG_OK" ]; then
      fresh_pg
      idem_run "$IDEM_PG" "$w" fresh idem-postgres "$r"
      idem_run "$IDEM_PG" "$w" rerun idem-postgres "$r"
      line="$line, idem postgres $(rate "$(grep "^$r $w idem-postgres fresh " "$RESULTS" | cut -d' ' -f5)")/$(rate "$secs")"
    fi
    echo "$line ops/s fresh/re-run, each checked"
  done
  r=$((r + 1))
done
echo
"$PY" "$HERE/report.py" table "$RESULTS" "$N"
[ -z "${RESULTS_OUT:-}" ] || cp "$RESULTS" "$RESULTS_OUT"
