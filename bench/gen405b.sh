#!/bin/sh
# Benchmark: generate the Llama-3 405B configuration (126 layers, dp 64, tp 8,
# pp 16, nm 16, 128 heads, 8 kv heads, small hidden size), then read it back,
# validate it and build its SSA graph.  Prints wall time, peak RSS and file
# sizes.  Not part of `make test`; run `sh bench/gen405b.sh` after `make`.
set -eu
cd "$(dirname "$0")/.."
. bench/gen_lib.sh
echo "llama3 405B shape: 126 layers, dp64 tp8 pp16 nm16, 128 heads / 8 kv heads, hidden 1024"
measure "gen (both plans)" "$V" gen --model llama3 --layers 126 --hidden 1024 --heads 128 \
  --kv-heads 8 --ffn 2048 --seq 128 --batch 1024 --vocab 1024 \
  --dp 64 --tp 8 --pp 16 --nm 16 --single "$OUT/405b.single.plan" --parallel "$OUT/405b.parallel.plan"
plan_figures 405b
