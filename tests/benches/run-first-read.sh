#!/bin/sh
# `idem run --worker` with a Rust policy and its JavaScript (and Python) port,
# with two builds of idem side by side in one run, interleaved per round: the
# rate of each language's run, and its ratio to the Rust one's of the same
# build. For a change to the first read (job/plan.rs), where a JavaScript or
# Python policy spends most of its run.
# Usage: [ROUNDS=3] [CONCURRENCY=32] tests/benches/run-first-read.sh BEFORE AFTER RUST.wasm JS.wasm [PY.wasm] [OPS]
# (the ports: `idem build guest/js/policies/billing-charge --out DIR`, and
# the same for guest/python/policies/billing-charge; PY may be `-`).
set -eu
BEFORE=$1 AFTER=$2 RUST=$3 JS=$4 PY=${5:--}
N=${6:-20000}
C=${CONCURRENCY:-32}
ROUNDS=${ROUNDS:-3}
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
export IDEM_CACHE_DIR="$DIR/cache"
awk -v n="$N" 'BEGIN { for (i = 0; i < n; i++)
  printf "{\"kind\":\"charge\",\"tenant\":\"acme\",\"fields\":{\"customer\":\"c%d\",\"billing_period\":\"2026-11\",\"invoice_id\":\"i%d\",\"amount\":\"%d\",\"currency\":\"EUR\"}}\n", i, i, i % 1000 + 1 }' > "$DIR/ops.jsonl"
WORKER='BEGIN { print "{\"ready\":true}"; fflush() } { print "{\"status\":0,\"body\":\"ok\"}"; fflush() }'
now() { date +%s.%N; }
langs="rust js"
[ "$PY" = - ] || langs="$langs python"
for build in before after; do
  case $build in before) I=$BEFORE ;; after) I=$AFTER ;; esac
  # Compile into the cache first: the runs measure running, not compiling.
  for P in $RUST $JS; do "$I" describe --policy "$P" > /dev/null; done
  [ "$PY" = - ] || "$I" describe --policy "$PY" > /dev/null
done
echo "$N operations, concurrency $C, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
for round in $(seq "$ROUNDS"); do
  for build in before after; do
    case $build in before) I=$BEFORE ;; after) I=$AFTER ;; esac
    rust_rate=
    line="round $round $build:"
    for lang in $langs; do
      case $lang in rust) P=$RUST ;; js) P=$JS ;; python) P=$PY ;; esac
      rm -f "$DIR/run.db"*
      t0=$(now)
      "$I" run --policy "$P" --store "sqlite:$DIR/run.db" --ops "$DIR/ops.jsonl" \
        --concurrency "$C" --worker -- awk "$WORKER" > /dev/null 2>&1
      t1=$(now)
      rate=$(echo "$N $t0 $t1" | awk '{ printf "%.0f", $1 / ($3 - $2) }')
      rust_rate=${rust_rate:-$rate}
      line="$line $lang $(echo "$t0 $t1" | awk '{ printf "%.1f", $2 - $1 }') s $rate/s ($(echo "$rate $rust_rate" | awk '{ printf "%.2f", $1 / $2 }')x rust);"
    done
    echo "$line"
  done
done
