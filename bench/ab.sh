#!/bin/sh
# bench/ab.sh - two verdict binaries side by side in one run: the same plan
# pairs verified by each, alternating which goes first, with both verdicts
# (exit codes) and wall times per row, then the totals and the worst ratio.
# Used to show that a change keeps every verdict and its cost (issue 11:
# "no slower than 1.5x, measured side by side").
#
#   sh bench/ab.sh OLD_VERDICT NEW_VERDICT [PLAN_DIR]
#
# Rows: the generator configurations below (plans made by NEW's `gen`), then
# every pair NAME.single.plan / NAME.parallel.plan of PLAN_DIR (for example
# build/corpus after `make corpus`).  ROWS_MAX=N stops after N pairs of
# PLAN_DIR; TIMEOUT=S (default 300) bounds each run (exit 124 = killed).
# Exit 1 when a verdict differs.
set -u
[ $# -ge 2 ] || { echo "usage: sh bench/ab.sh OLD_VERDICT NEW_VERDICT [PLAN_DIR]" >&2; exit 2; }
OLD=$1
NEW=$2
DIR=${3:-}
TO=${TIMEOUT:-300}
MAX=${ROWS_MAX:-100000}
OUT=${OUT:-build/bench/ab}
mkdir -p "$OUT"
CONFIGS="llama3 --dp 2 --tp 2 --pp 2 --nm 2;llama3 --dp 2 --tp 2 --pp 2 --nm 2 --sp;llama3 --tp 2 --cp 2;\
llama3 --dp 2 --nm 2 --zero 1 --optimizer adam;llama3 --layers 32 --dp 2 --tp 2 --pp 2 --nm 2;\
mlp --dp 2 --tp 2;moe --tp 4;moe --dp 2 --tp 2 --ep 2;moe --tp 2 --pp 2 --nm 2 --sp"

# run BIN SINGLE PARALLEL -> "rc seconds"
run() {
  t0=$(date +%s.%N)
  timeout "$TO" "$1" -q --sm "$2" --pm "$3" >/dev/null 2>&1
  rc=$?
  t1=$(date +%s.%N)
  echo "$rc $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')"
}

n=0
diff=0
printf '%-58s %4s %4s %9s %9s %7s\n' "pair" "old" "new" "old s" "new s" "new/old"
row() { # name single parallel
  if [ $((n % 2)) = 0 ]; then
    o=$(run "$OLD" "$2" "$3"); w=$(run "$NEW" "$2" "$3")
  else
    w=$(run "$NEW" "$2" "$3"); o=$(run "$OLD" "$2" "$3")
  fi
  n=$((n + 1))
  set -- "$1" $o $w
  mark=""
  [ "$2" = "$4" ] || { mark="  VERDICT DIFFERS"; diff=1; }
  printf '%-58s %4s %4s %9s %9s %7s%s\n' "$1" "$2" "$4" "$3" "$5" \
    "$(awk -v a="$3" -v b="$5" 'BEGIN { if (a > 0) printf "%.2f", b / a; else print "-" }')" "$mark"
  echo "$3 $5" >>"$OUT/times"
}
rm -f "$OUT/times"
IFS=';'
for cfg in $CONFIGS; do
  unset IFS
  model=${cfg%% *}
  rest=${cfg#* }
  # shellcheck disable=SC2086
  if "$NEW" gen --model $model $rest --single "$OUT/s.plan" --parallel "$OUT/p.plan" >/dev/null 2>&1; then
    row "$cfg" "$OUT/s.plan" "$OUT/p.plan"
  else
    printf '%-58s gen failed\n' "$cfg"
  fi
  IFS=';'
done
unset IFS
if [ -n "$DIR" ]; then
  k=0
  for s in "$DIR"/*.single.plan; do
    [ -e "$s" ] || continue
    [ "$k" -lt "$MAX" ] || break
    k=$((k + 1))
    p=${s%.single.plan}.parallel.plan
    [ -e "$p" ] && row "$(basename "${s%.single.plan}" | cut -c1-58)" "$s" "$p"
  done
fi
awk '{ a += $1; b += $2; if ($1 > 0.2 && $2 / $1 > w) { w = $2 / $1 } }
     END { printf "total: old %.1f s, new %.1f s, new/old %.2f; worst row (old > 0.2 s) %.2f\n", a, b, b / a, w }' "$OUT/times"
[ $diff = 0 ] && echo "verdicts: identical" || echo "verdicts: DIFFER"
exit $diff
