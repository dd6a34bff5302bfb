#!/bin/sh
# bench/strip_matrix.sh - the generator matrix (tests/e2e/10_verify_matrix.sh's
# configurations), each verified twice: with every lineage annotation and
# stripped to its boundary (`verdict plan strip --keep boundary`, lineages
# inferred).  One line per configuration:
#   RC_FULL RC_STRIP full=Ts strip=Ts ratio=R <lineages line> :: gen args
# and a summary (same verdicts, worst and mean time ratio).  A benchmark,
# not a test: tests/e2e/15_inference.sh runs a subset.
#
#   sh bench/strip_matrix.sh [path/to/verdict]      (ONLY="cp ep" filters)
VERDICT=${1:-bin/verdict}
T=${TIMEOUT:-300}
W=$(mktemp -d "${TMPDIR:-/tmp}/strip-matrix.XXXXXX") || exit 2
trap 'rm -rf "$W"' EXIT INT TERM
. "$(dirname "$0")/../tests/e2e/matrix.sh"
now() { date +%s.%N; }
same=0 diff=0 n=0
run() {
  if [ -n "$ONLY" ]; then
    hit=0
    for o in $ONLY; do case " $* " in *" --$o "*) hit=1 ;; esac; done
    [ $hit = 1 ] || return 0
  fi
  "$VERDICT" gen "$@" --single "$W/s.plan" --parallel "$W/p.plan" >/dev/null 2>&1 || { echo "gen failed :: $*"; return; }
  "$VERDICT" plan strip --keep boundary "$W/p.plan" "$W/b.plan" >/dev/null 2>&1 || { echo "strip failed :: $*"; return; }
  t0=$(now); timeout $T "$VERDICT" -q --sm "$W/s.plan" --pm "$W/p.plan" >"$W/full.out" 2>&1; rf=$?; t1=$(now)
  timeout $T "$VERDICT" -q --sm "$W/s.plan" --pm "$W/b.plan" >"$W/strip.out" 2>&1; rs=$?; t2=$(now)
  tf=$(echo "$t1 - $t0" | bc); ts=$(echo "$t2 - $t1" | bc)
  lin=$(sed -n 's/^  lineages: //p' "$W/strip.out")
  ratio=$(echo "scale=2; $ts / $tf" | bc)
  echo "$rf $rs full=${tf}s strip=${ts}s ratio=$ratio $lin :: $*"
  n=$((n + 1))
  if [ "$rf" = "$rs" ]; then same=$((same + 1)); else diff=$((diff + 1)); fi
  echo "$ratio" >>"$W/ratios"
}
for_each_config run
if [ "$n" -gt 0 ]; then
  sort -n "$W/ratios" | awk -v n="$n" -v s="$same" '{a[NR]=$1; t+=$1} END {printf "summary: %d configurations, %d same verdict; time ratio stripped/full mean %.2f, worst %.2f\n", n, s, t/NR, a[NR]}'
fi
