#!/bin/sh
# `idem run --worker` with the same policy in Rust, JavaScript and Python,
# side by side in one run (release CLI), on SQLite: the rate over N fresh
# operations and the peak resident memory of each run.
# Usage: [CONCURRENCY=32] [JS_QUICKJS=JSQ.wasm] tests/benches/run-languages.sh IDEM RUST.wasm JS.wasm PY.wasm [OPS]
# (the ports: `idem build guest/js/policies/billing-charge --out DIR`, and
# the same for guest/python/policies/billing-charge; JS_QUICKJS adds the
# JavaScript port built with `--js-engine quickjs`).
set -eu
IDEM=$1 RUST=$2 JS=$3 PY=$4
N=${5:-100000}
C=${CONCURRENCY:-32}
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
export IDEM_CACHE_DIR="$DIR/cache"
awk -v n="$N" 'BEGIN { for (i = 0; i < n; i++)
  printf "{\"kind\":\"charge\",\"tenant\":\"acme\",\"fields\":{\"customer\":\"c%d\",\"billing_period\":\"2026-11\",\"invoice_id\":\"i%d\",\"amount\":\"%d\",\"currency\":\"EUR\"}}\n", i, i, i % 1000 + 1 }' > "$DIR/ops.jsonl"
WORKER='BEGIN { print "{\"ready\":true}"; fflush() } { print "{\"status\":0,\"body\":\"ok\"}"; fflush() }'
now() { date +%s.%N; }
rust_rate=
for lang in rust js ${JS_QUICKJS:+js-quickjs} python; do
  case $lang in rust) P=$RUST ;; js) P=$JS ;; js-quickjs) P=$JS_QUICKJS ;; python) P=$PY ;; esac
  # Compile into the cache first: the run measures running, not compiling.
  "$IDEM" describe --policy "$P" > /dev/null
  t0=$(now)
  /usr/bin/time -f "%M" -o "$DIR/rss" "$IDEM" run --policy "$P" --store "sqlite:$DIR/$lang.db" \
    --ops "$DIR/ops.jsonl" --concurrency "$C" --worker -- awk "$WORKER" > /dev/null 2>&1
  t1=$(now)
  rate=$(echo "$N $t0 $t1" | awk '{ printf "%.0f", $1 / ($3 - $2) }')
  rust_rate=${rust_rate:-$rate}
  echo "$lang: $N ops in $(echo "$t0 $t1" | awk '{ printf "%.1f", $2 - $1 }') s, $rate ops/s, $(echo "$rate $rust_rate" | awk '{ printf "%.2f", $1 / $2 }')x rust, peak RSS $(( $(cat "$DIR/rss") / 1024 )) MiB"
done
