#!/bin/sh
# Benchmark: the MoE matrix of issue 14 (4 layers, DeepSeek-style MoE of
# docs/models.md): tp 1 2 4 8, ep 1 2 4 8, dp 1..8, sp, zero + adam, and
# mixes of them (dp * ep * nm must divide the batch: 8, or 24/40/56 for
# dp 3/5/7).  For each configuration: the verdict, wall time, stages,
# classes solved, the hardest stage's deterministic work (normal-form steps
# + Z3 resource units, from -v) and whether `verdict exec` agrees.  Not part
# of `make test`: run `sh bench/moe_matrix.sh` after `make`.
#   THREADS=N (default: all cores)   CONFIGS="--tp 4;--ep 8" (';'-separated)
# Exit 1 when a configuration is not EQUIVALENT or exec disagrees.
set -u
cd "$(dirname "$0")/.."
V=${VERDICT:-bin/verdict}
OUT=${OUT:-build/bench/moe}
TH=${THREADS:-}
mkdir -p "$OUT"
# --heads 8 so that tp 8 divides the heads; --experts 8 so that ep 8 does.
BASE="--model moe --layers 4 --heads 8 --experts 8"
DEFAULT_CONFIGS="--tp 1;--tp 2;--tp 4;--tp 8;--ep 2;--ep 4;--ep 8;--dp 2;--dp 3 --batch 24;--dp 4;\
--dp 5 --batch 40;--dp 6 --batch 24;--dp 7 --batch 56;--dp 8;--tp 2 --sp;--tp 4 --sp;--tp 8 --sp;\
--dp 2 --zero 1 --optimizer adam;--dp 4 --zero 1 --optimizer adam;--dp 8 --zero 1 --optimizer adam;\
--dp 2 --tp 2 --ep 2;--dp 2 --tp 4 --ep 2 --sp;--dp 2 --ep 2 --zero 1 --optimizer adam;\
--dp 2 --tp 2 --sp --zero 1 --optimizer adam;--dp 2 --tp 2 --pp 2 --nm 2 --ep 2"
CONFIGS=${CONFIGS:-$DEFAULT_CONFIGS}
bad=0
printf '%-58s %-14s %7s %7s %7s %12s  %s\n' "configuration" "verdict" "wall s" "stages" "classes" "max work" "exec"
IFS=';'
for cfg in $CONFIGS; do
  unset IFS
  # shellcheck disable=SC2086
  if ! "$V" gen $BASE $cfg --single "$OUT/s.plan" --parallel "$OUT/p.plan" >"$OUT/gen.log" 2>&1; then
    printf '%-58s %s\n' "$cfg" "gen failed: $(head -1 "$OUT/gen.log")"
    bad=1
    IFS=';'
    continue
  fi
  t0=$(date +%s.%N)
  # shellcheck disable=SC2086
  "$V" --sm "$OUT/s.plan" --pm "$OUT/p.plan" -v ${TH:+--threads $TH} >"$OUT/v.log" 2>&1
  rc=$?
  t1=$(date +%s.%N)
  verdict=$(head -1 "$OUT/v.log")
  stages=$(sed -n 's/^  stages \([0-9]*\) (classes solved \([0-9]*\).*/\1/p' "$OUT/v.log")
  classes=$(sed -n 's/^  stages [0-9]* (classes solved \([0-9]*\).*/\1/p' "$OUT/v.log")
  work=$(sed -n 's/^  hardest stages by work: [0-9]* ([0-9.]*s, work \([0-9]*\),.*/\1/p' "$OUT/v.log")
  if "$V" exec --sm "$OUT/s.plan" --pm "$OUT/p.plan" -q >"$OUT/e.log" 2>&1; then ex=agree; else ex="DISAGREE($?)"; fi
  printf '%-58s %-14s %7.2f %7s %7s %12s  %s\n' "$cfg" "$verdict" "$(echo "$t1 - $t0" | bc)" "$stages" "$classes" \
    "${work:-?}" "$ex"
  [ "$rc" = 0 ] && [ "$ex" = agree ] || bad=1
  IFS=';'
done
unset IFS
exit $bad
