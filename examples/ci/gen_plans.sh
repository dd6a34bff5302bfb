#!/bin/sh
# examples/ci/gen_plans.sh - generates the plans of examples/ci/gate.manifest:
# the nine correct configurations of the bug suite's matrix
# (tests/bugs/run_suite.sh: Llama-3 style, 2 layers, hidden 16, dp2 tp2 pp2
# nm2, plus sp / cp / clipping / loss mask / tied embeddings / ZeRO with Adam /
# ZeRO / MoE with ep) into examples/ci/plans/ (not committed: regenerated
# here in about a second).
#
#   sh examples/ci/gen_plans.sh [VERDICT] [OUT_DIR]
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
VERDICT=${1:-${VERDICT:-$HERE/../../bin/verdict}}
OUT=${2:-$HERE/plans}
mkdir -p "$OUT"
BASE="--model llama3 --layers 2 --hidden 16 --heads 4 --seq 8 --batch 8 --dp 2 --tp 2 --pp 2 --nm 2"
gen() { # NAME OPTS...
  name=$1; shift
  # shellcheck disable=SC2086
  "$VERDICT" gen $BASE "$@" --single "$OUT/$name.single.plan" --parallel "$OUT/$name.parallel.plan" >/dev/null
}
gen base
gen sp --sp
gen cp2 --cp 2
gen clip --grad-clip 0.001
gen lossmask --loss-mask
gen tied --tie-embeddings
gen zero1-adam --zero 1 --optimizer adam
gen zero1 --zero 1
gen moe-ep2 --model moe --ep 2
