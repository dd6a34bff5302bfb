# Helpers sourced by the generator benchmarks (bench/gen405b.sh, bench/gendsv3.sh), from the
# repository's root: the binary $V ($VERDICT, or bin/verdict), the output folder $OUT
# (build/bench), measure, and the figures of a generated pair of plans.
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
# plan_figures NAME: the sizes of $OUT/NAME.single.plan and $OUT/NAME.parallel.plan, then the
# parallel plan read back, validated and its statistics printed, each measured
plan_figures() {
  for f in single parallel; do
    awk -v l="$f plan file" -v b="$(stat -c %s "$OUT/$1.$f.plan")" 'BEGIN { printf "%-28s %8.1f MB\n", l, b / 1048576 }'
  done
  measure "validate parallel plan" "$V" plan validate "$OUT/$1.parallel.plan"
  measure "stats parallel plan" "$V" plan stats "$OUT/$1.parallel.plan"
  grep -E "ranks|nodes:" "$OUT/stats parallel plan.out" || true
}
