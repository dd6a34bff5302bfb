#!/bin/sh
# bench/noise.sh - the figures of docs/noise.md: every configuration of examples/torch run for real
# in float32 and bfloat16 (make noise-demo's runs: tools/torch2plan --dump-*, verdict compare),
# then every bug, and the table and the plot of realistic bound against observed deviation per
# precision (bench/noise_figures.py, python3 standard library).
#   sh bench/noise.sh [VERDICT]        writes build/noise/*, docs/img/noise_bound_vs_observed.svg
# and prints the markdown tables.  About 5 minutes on 2 cores.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
VERDICT=${1:-$ROOT/bin/verdict}
OUT=${OUT:-$ROOT/build/noise}
export OUT
t0=$(date +%s)
sh "$ROOT/examples/torch/noise_demo.sh" "$VERDICT" >"$OUT.configs.log" 2>&1
c=$?
sh "$ROOT/examples/torch/noise_demo.sh" "$VERDICT" bug=no_allreduce bug=grad_scale bug=pp_recv bug=dp_noavg \
  bug=no_sp_gather bug=tie_noreduce bug=lowprec bug=data >"$OUT.bugs.log" 2>&1
b=$?
t1=$(date +%s)
python3 "$ROOT/bench/noise_figures.py" "$OUT" "$ROOT/docs/img/noise_bound_vs_observed.svg"
echo "configurations: exit $c; bugs: exit $b; $((t1 - t0)) s (logs: $OUT.configs.log, $OUT.bugs.log)"
[ $c = 0 ] && [ $b = 0 ]
