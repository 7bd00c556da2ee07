#!/bin/sh
# Two builds side by side in one run: `idem run --worker --concurrency C`
# over OPS fresh operations on SQLite (an awk worker answering each line),
# BEFORE and AFTER interleaved per round; prints each run's rate, each
# round's AFTER ÷ BEFORE, and the ratio of the medians (with an even
# ROUNDS, the lower middle). On a shared
# machine read the ratios, not the rates.
#
# Usage: [ROUNDS=3] [CONCURRENCY=32] tests/benches/run-pair.sh BEFORE AFTER POLICY.wasm [OPS]
#   BEFORE, AFTER  two release `idem` binaries (`git worktree add` of each
#                  commit, `cargo build --release -p idem-cli` in each)
#   POLICY         a billing-charge component both load (one built by the
#                  older tree's SDK loads in every newer host)
#   OPS            operations per run (default 50000)
# Each run is checked: every operation executed.
set -eu
BEFORE=$1 AFTER=$2 POLICY=$3
N=${4:-50000}
C=${CONCURRENCY:-32}
ROUNDS=${ROUNDS:-3}
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
awk -v n="$N" 'BEGIN { for (i = 0; i < n; i++)
  printf "{\"kind\":\"charge\",\"tenant\":\"acme\",\"fields\":{\"customer\":\"c%d\",\"billing_period\":\"2026-11\",\"invoice_id\":\"i%d\",\"amount\":\"%d\",\"currency\":\"EUR\"}}\n", i, i, i % 1000 + 1 }' > "$DIR/ops.jsonl"
WORKER='BEGIN { print "{\"ready\":true}"; fflush() } { print "{\"status\":0,\"body\":\"ok\"}"; fflush() }'
now() { date +%s.%N; }
one() { # IDEM NAME -> ops/s
  rm -f "$DIR/$2.db" "$DIR/$2.db-wal" "$DIR/$2.db-shm"
  # The policy compiled into the cache untimed; the run (the store's
  # creation included) is timed.
  IDEM_CACHE_DIR="$DIR/cache-$2" "$1" describe --policy "$POLICY" > /dev/null
  t0=$(now)
  IDEM_CACHE_DIR="$DIR/cache-$2" "$1" run --policy "$POLICY" --store "sqlite:$DIR/$2.db" \
    --ops "$DIR/ops.jsonl" --concurrency "$C" --worker --json -- awk "$WORKER" > "$DIR/$2.json" 2> "$DIR/$2.err"
  t1=$(now)
  grep -q "\"executed\":$N," "$DIR/$2.json" || { echo "$2: not every operation executed: $(cat "$DIR/$2.json")" >&2; exit 1; }
  echo "$N $t0 $t1" | awk '{ printf "%.0f", $1 / ($3 - $2) }'
}
: > "$DIR/rates"
r=1
while [ "$r" -le "$ROUNDS" ]; do
  # One assignment a line: `set -e` sees each run's failure.
  b=$(one "$BEFORE" before)
  a=$(one "$AFTER" after)
  echo "$b $a" >> "$DIR/rates"
  echo "round $r: before $b ops/s, after $a ops/s, after ÷ before $(echo "$a $b" | awk '{ printf "%.2f", $1 / $2 }')x (load $(cut -d' ' -f1 /proc/loadavg))"
  r=$((r + 1))
done
sort -n -k1 "$DIR/rates" | awk '{ b[NR] = $1 } END { print b[int((NR + 1) / 2)] }' > "$DIR/mb"
sort -n -k2 "$DIR/rates" | awk '{ a[NR] = $2 } END { print a[int((NR + 1) / 2)] }' > "$DIR/ma"
echo "medians: before $(cat "$DIR/mb") ops/s, after $(cat "$DIR/ma") ops/s, after ÷ before $(paste "$DIR/ma" "$DIR/mb" | awk '{ printf "%.2f", $1 / $2 }')x"
