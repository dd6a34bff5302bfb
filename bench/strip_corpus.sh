#!/bin/sh
# bench/strip_corpus.sh - converted plan pairs verified with full annotations
# and stripped to their boundary (`verdict plan strip --keep boundary`),
# side by side: each pair REPS times both ways, alternating, and the minimum
# wall time and minimum CPU time (user + sys of the verdict process) of each.
# On a shared machine the minimum of a few runs, and CPU time beside wall
# time, is what tells a real 2x from a scheduler's.  One line per pair:
#   RC_FULL RC_STRIP wall FULL STRIP ratio R cpu FULL STRIP ratio R lineages :: NAME
# then the summary (same verdicts; mean and worst ratios, wall and CPU).
# A benchmark, not a test (docs/verifier.md 1b quotes it).
#
#   sh bench/strip_corpus.sh [VERDICT] [PLAN_DIR]
#
# PLAN_DIR (default build/corpus, written by `make corpus`) holds
# NAME.single.plan / NAME.parallel.plan pairs.  ROWS="1 25 61" keeps the
# pairs whose name starts with those numbers (01_, 25_, 61_); REPS=N
# (default 3); TIMEOUT=S per run (default 300; exit 124 = killed).
set -u
VERDICT=${1:-bin/verdict}
DIR=${2:-build/corpus}
REPS=${REPS:-3}
TO=${TIMEOUT:-300}
ROWS=${ROWS:-}
W=$(mktemp -d "${TMPDIR:-/tmp}/strip-corpus.XXXXXX") || exit 2
trap 'rm -rf "$W"' EXIT INT TERM

# one PARALLEL -> sets RC WALL CPU (seconds) of one verify run
one() {
  /usr/bin/time -f "%e %U %S" -o "$W/t" timeout "$TO" "$VERDICT" -q --sm "$S" --pm "$1" >"$W/out" 2>&1
  RC=$?
  set -- $(tail -1 "$W/t")
  WALL=$1
  CPU=$(echo "$2 + $3" | bc)
}
min() { echo "$1 $2" | awk '{ print ($1 < $2) ? $1 : $2 }'; }
ratio() { echo "$1 $2" | awk '{ printf "%.2f", ($1 > 0) ? $2 / $1 : 1 }'; }

n=0 same=0
for S in "$DIR"/*.single.plan; do
  [ -f "$S" ] || continue
  name=$(basename "$S" .single.plan)
  if [ -n "$ROWS" ]; then
    hit=0
    for r in $ROWS; do case "$name" in "$(printf '%02d' "$r")"_*) hit=1 ;; esac; done
    [ $hit = 1 ] || continue
  fi
  P="$DIR/$name.parallel.plan"
  B="$W/b.plan"
  "$VERDICT" plan strip --keep boundary "$P" "$B" >/dev/null 2>&1 || { echo "strip failed :: $name"; continue; }
  fw=999999 fc=999999 sw=999999 sc=999999
  k=0
  while [ $k -lt "$REPS" ]; do
    if [ $((k % 2)) = 0 ]; then
      one "$P"; rf=$RC; fw=$(min "$fw" "$WALL"); fc=$(min "$fc" "$CPU")
      one "$B"; rs=$RC; sw=$(min "$sw" "$WALL"); sc=$(min "$sc" "$CPU"); lin=$(sed -n 's/^  lineages: //p' "$W/out")
    else
      one "$B"; rs=$RC; sw=$(min "$sw" "$WALL"); sc=$(min "$sc" "$CPU"); lin=$(sed -n 's/^  lineages: //p' "$W/out")
      one "$P"; rf=$RC; fw=$(min "$fw" "$WALL"); fc=$(min "$fc" "$CPU")
    fi
    k=$((k + 1))
  done
  rw=$(ratio "$fw" "$sw"); rc=$(ratio "$fc" "$sc")
  echo "$rf $rs wall $fw $sw ratio $rw cpu $fc $sc ratio $rc $lin :: $name"
  echo "$rw $rc" >>"$W/ratios"
  n=$((n + 1))
  [ "$rf" = "$rs" ] && same=$((same + 1))
done
[ -f "$W/ratios" ] || { echo "no pairs in $DIR"; exit 1; }
awk -v n="$n" -v s="$same" '{ w += $1; c += $2; if ($1 > mw) mw = $1; if ($2 > mc) mc = $2 }
  END { printf "summary: %d pairs, %d same verdict; ratio stripped/full wall mean %.2f worst %.2f, cpu mean %.2f worst %.2f\n",
        n, s, w / NR, mw, c / NR, mc }' "$W/ratios"
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
[ "$same" = "$n" ]
