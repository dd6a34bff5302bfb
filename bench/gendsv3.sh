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
. bench/gen_lib.sh
echo "DeepSeek-V3-like shape: 61 layers, 256 experts top-8, dp32 (= dp4 x ep8) tp8 pp8 nm16, hidden 512"
measure "gen (both plans)" "$V" gen --model moe --layers 61 --hidden 512 --heads 128 --seq 128 --batch 1024 \
  --vocab 1024 --experts 256 --topk 8 --dp 4 --ep 8 --tp 8 --pp 8 --nm 16 \
  --single "$OUT/dsv3.single.plan" --parallel "$OUT/dsv3.parallel.plan"
plan_figures dsv3
