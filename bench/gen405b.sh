#!/bin/sh
# Benchmark: generate the Llama-3 405B configuration (126 layers, dp 64, tp 8,
# pp 16, nm 16, 128 heads, 8 kv heads, small hidden size), then read it back,
# validate it and build its SSA graph.  Prints wall time, peak RSS and file
# sizes.  Not part of `make test`; run `sh bench/gen405b.sh` after `make`.
set -eu
cd "$(dirname "$0")/.."
V=${VERDICT:-bin/verdict}
OUT=${OUT:-build/bench}
mkdir -p "$OUT"
measure() { # label cmd...
  label=$1; shift
  /usr/bin/time -f "%e %M" -o "$OUT/time" "$@" >"$OUT/$label.out" 2>"$OUT/$label.err" || {
    cat "$OUT/$label.err"; exit 1; }
  read -r secs kb <"$OUT/time"
  awk -v l="$label" -v s="$secs" -v k="$kb" 'BEGIN { printf "%-28s %8.2f s  %8.1f MB peak RSS\n", l, s, k / 1024 }'
}
echo "llama3 405B shape: 126 layers, dp64 tp8 pp16 nm16, 128 heads / 8 kv heads, hidden 1024"
measure "gen (both plans)" "$V" gen --model llama3 --layers 126 --hidden 1024 --heads 128 \
  --kv-heads 8 --ffn 2048 --seq 128 --batch 1024 --vocab 1024 \
  --dp 64 --tp 8 --pp 16 --nm 16 --single "$OUT/405b.single.plan" --parallel "$OUT/405b.parallel.plan"
for f in single parallel; do
  awk -v l="$f plan file" -v b="$(stat -c %s "$OUT/405b.$f.plan")" 'BEGIN { printf "%-28s %8.1f MB\n", l, b / 1048576 }'
done
measure "validate parallel plan" "$V" plan validate "$OUT/405b.parallel.plan"
measure "stats parallel plan" "$V" plan stats "$OUT/405b.parallel.plan"
grep -E "ranks|nodes:" "$OUT/stats parallel plan.out" || true
