#!/bin/sh
# Benchmark: generate the DeepSeek-V3-like MoE configuration of VERDICT's
# table (61 layers, 256 routed experts, top-8, hidden 512, 128 heads, seq 128,
# global batch 1024; 2048 GPUs as dp32 x tp8 x pp8 with expert parallelism 8
# inside the data-parallel group, nm 16), then read it back, validate it and
# print its statistics.  Prints wall time, peak RSS and file sizes.
#
# In verdict's generator the ep ranks are data parallel for everything but
# the experts and are stored ranks of one replica (docs/models.md), so data
# parallelism 32 with ep 8 inside it is --dp 4 --ep 8: 4 x 8 x 8 x 8 = 2048
# ranks (512 stored x 4 replicas), the same 2048 GPUs.
# Not part of `make test`; run `sh bench/gendsv3.sh` after `make`, then
#   bin/verdict --sm build/bench/dsv3.single.plan --pm build/bench/dsv3.parallel.plan
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
echo "DeepSeek-V3-like shape: 61 layers, 256 experts top-8, dp32 (= dp4 x ep8) tp8 pp8 nm16, hidden 512"
measure "gen (both plans)" "$V" gen --model moe --layers 61 --hidden 512 --heads 128 --seq 128 --batch 1024 \
  --vocab 1024 --experts 256 --topk 8 --dp 4 --ep 8 --tp 8 --pp 8 --nm 16 \
  --single "$OUT/dsv3.single.plan" --parallel "$OUT/dsv3.parallel.plan"
for f in single parallel; do
  awk -v l="$f plan file" -v b="$(stat -c %s "$OUT/dsv3.$f.plan")" 'BEGIN { printf "%-28s %8.1f MB\n", l, b / 1048576 }'
done
measure "validate parallel plan" "$V" plan validate "$OUT/dsv3.parallel.plan"
measure "stats parallel plan" "$V" plan stats "$OUT/dsv3.parallel.plan"
grep -E "ranks|nodes:" "$OUT/stats parallel plan.out" || true
