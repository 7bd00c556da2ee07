#!/bin/sh
# `idem run` end to end, side by side in one run (release CLI):
#   1. fresh operations, a process per operation (`-- true`) against
#      `--worker` (an awk worker answering each line), on SQLite;
#   2. peak resident memory of a fresh `--worker` run over N operations.
# Usage: [CONCURRENCY=32] tests/benches/run-cli.sh IDEM POLICY.wasm [OPS_PROCESS] [OPS_WORKER] [OPS_MEMORY]
set -eu
IDEM=$1 POLICY=$2
C=${CONCURRENCY:-32}
N_PROC=${3:-20000} N_WORK=${4:-200000} N_MEM=${5:-1000000}
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
export IDEM_CACHE_DIR="$DIR/cache"
ops() {
  awk -v n="$1" 'BEGIN { for (i = 0; i < n; i++)
    printf "{\"kind\":\"charge\",\"tenant\":\"acme\",\"fields\":{\"customer\":\"c%d\",\"billing_period\":\"2026-11\",\"invoice_id\":\"i%d\",\"amount\":\"%d\",\"currency\":\"EUR\"}}\n", i, i, i % 1000 + 1 }' > "$2"
}
WORKER='BEGIN { print "{\"ready\":true}"; fflush() } { print "{\"status\":0,\"body\":\"ok\"}"; fflush() }'
now() { date +%s.%N; }
rate() { echo "$1 $2 $3" | awk '{ printf "%.0f", $1 / ($3 - $2) }'; }

ops "$N_PROC" "$DIR/proc.jsonl"
ops "$N_WORK" "$DIR/work.jsonl"
t0=$(now)
"$IDEM" run --policy "$POLICY" --store "sqlite:$DIR/a.db" --ops "$DIR/proc.jsonl" --concurrency "$C" -- true
t1=$(now)
"$IDEM" run --policy "$POLICY" --store "sqlite:$DIR/b.db" --ops "$DIR/work.jsonl" --concurrency "$C" --worker -- awk "$WORKER"
t2=$(now)
p=$(rate "$N_PROC" "$t0" "$t1"); w=$(rate "$N_WORK" "$t1" "$t2")
echo "process per operation: $N_PROC ops, $p ops/s"
echo "--worker:              $N_WORK ops, $w ops/s"
echo "ratio: $(echo "$w $p" | awk '{ printf "%.1f", $1 / $2 }')x"

ops "$N_MEM" "$DIR/mem.jsonl"
/usr/bin/time -f "peak RSS %M KiB, %e s" "$IDEM" run --policy "$POLICY" --store "sqlite:$DIR/c.db" \
  --ops "$DIR/mem.jsonl" --concurrency "$C" --worker -- awk "$WORKER"
