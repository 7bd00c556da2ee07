#!/bin/sh
# A lone worker, two builds side by side in one run: `idem run --worker
# --concurrency 1` over OPS fresh operations, then the same again (a re-run:
# every operation a replay), on SQLite and on PostgreSQL, BEFORE and AFTER
# interleaved per round; prints each build's median ops/s and the
# AFTER ÷ BEFORE ratio of the medians.
#
# Usage: [ROUNDS=3] tests/benches/run-lone.sh BEFORE AFTER POLICY.wasm [OPS]
#   BEFORE, AFTER  two release `idem` binaries (say, `git worktree add` of
#                  each commit and `cargo build --release -p idem-cli` in it)
#   POLICY         the billing-charge policy (`cargo xtask build` leaves it in
#                  target/policies/billing-charge.wasm)
#   OPS            operations per run (default 100000)
#   IDEM_BENCH_POSTGRES_URL (postgres://postgres@127.0.0.1:5432/test; "none"
#                  skips PostgreSQL): schema idem_lone_bench, dropped before
#                  each fresh run and at the end (needs psql).
# Timing: the whole `idem run` command (its start and exit included); stores
# are created (migrated) untimed before each fresh run. Each run is checked:
# a fresh run executes every operation, a re-run replays every one.
set -eu
if [ $# -lt 3 ] || [ $# -gt 4 ]; then
  echo "usage: [ROUNDS=3] $0 BEFORE AFTER POLICY.wasm [OPS]" >&2
  exit 2
fi
BEFORE=$1 AFTER=$2 POLICY=$3 N=${4:-100000}
ROUNDS=${ROUNDS:-3}
PG=${IDEM_BENCH_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/test}
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
export IDEM_CACHE_DIR="$DIR/cache"
awk -v n="$N" 'BEGIN { for (i = 0; i < n; i++)
  printf "{\"kind\":\"charge\",\"tenant\":\"acme\",\"fields\":{\"customer\":\"c%d\",\"billing_period\":\"2026-11\",\"invoice_id\":\"i%d\",\"amount\":\"%d\",\"currency\":\"EUR\"}}\n", i, i, i % 1000 + 1 }' > "$DIR/ops.jsonl"
WORKER='BEGIN { print "{\"ready\":true}"; fflush() } { print "{\"status\":0,\"body\":\"ok\"}"; fflush() }'
now() { date +%s.%N; }

export PGOPTIONS='-c client_min_messages=warning'
if [ "$PG" != none ] && ! psql "$PG" -qAtc 'select 1' >/dev/null 2>&1; then
  echo "PostgreSQL at $PG is unreachable: its half is skipped"
  PG=none
fi
PG_STORE="$PG"
case "$PG" in *\?*) PG_STORE="$PG&idem_schema=idem_lone_bench" ;; *) PG_STORE="$PG?idem_schema=idem_lone_bench" ;; esac

# fresh_store STORE: an empty, migrated store.
fresh_store() {
  case "$1" in
    sqlite:*) rm -f "${1#sqlite:}" "${1#sqlite:}-wal" "${1#sqlite:}-shm" ;;
    *) psql "$PG" -qAtc 'drop schema if exists idem_lone_bench cascade' >/dev/null ;;
  esac
  "$BEFORE" migrate --store "$1" >/dev/null
}

# timed BIN STORE EXPECT: runs, checks the summary counts EXPECT (executed
# or replayed) = N, prints the seconds it took.
timed() {
  t0=$(now)
  "$1" run --policy "$POLICY" --store "$2" --ops "$DIR/ops.jsonl" --concurrency 1 --json \
    --worker -- awk "$WORKER" > "$DIR/out.json"
  t1=$(now)
  if ! grep -q "\"$3\":$N[,}]" "$DIR/out.json"; then
    echo "$1 on $2: expected $3 $N, got $(cat "$DIR/out.json")" >&2
    exit 1
  fi
  echo "$t0 $t1" | awk '{ printf "%.3f", $2 - $1 }'
}

# Warm the compiled-policy cache (untimed).
fresh_store "sqlite:$DIR/warm.db"
head -1 "$DIR/ops.jsonl" > "$DIR/one.jsonl"
"$BEFORE" run --policy "$POLICY" --store "sqlite:$DIR/warm.db" --ops "$DIR/one.jsonl" --json -- true >/dev/null
"$AFTER" run --policy "$POLICY" --store "sqlite:$DIR/warm.db" --ops "$DIR/one.jsonl" --json -- true >/dev/null

stores="sqlite:$DIR/bench.db"
[ "$PG" = none ] || stores="$stores $PG_STORE"
: > "$DIR/times"
for round in $(seq 1 "$ROUNDS"); do
  for store in $stores; do
    for side in before after; do
      if [ $side = before ]; then bin=$BEFORE; else bin=$AFTER; fi
      fresh_store "$store"
      f=$(timed "$bin" "$store" executed)
      r=$(timed "$bin" "$store" replayed)
      kind=${store%%:*}
      echo "$kind $side fresh $f" >> "$DIR/times"
      echo "$kind $side rerun $r" >> "$DIR/times"
      echo "round $round, $kind, $side: fresh $f s, re-run $r s"
    done
  done
done
[ "$PG" = none ] || psql "$PG" -qAtc 'drop schema if exists idem_lone_bench cascade' >/dev/null

echo
echo "lone worker (--concurrency 1 --worker), $N operations, median of $ROUNDS rounds:"
for kind in $(awk '{ print $1 }' "$DIR/times" | sort -u); do
  for phase in fresh rerun; do
    b=$(awk -v k="$kind" -v p="$phase" '$1 == k && $2 == "before" && $3 == p { print $4 }' "$DIR/times" | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }')
    a=$(awk -v k="$kind" -v p="$phase" '$1 == k && $2 == "after" && $3 == p { print $4 }' "$DIR/times" | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }')
    echo "$kind $phase $b $a" | awk -v n="$N" '{ printf "  %-10s %-6s before %7.0f ops/s, after %7.0f ops/s: %.2fx\n", $1, $2, n / $3, n / $4, $3 / $4 }'
  done
done
