#!/bin/sh
# bench/same_output.sh - two verdict binaries give the same output, byte for byte, once the
# figures that measure the machine (seconds, peak memory, threads) are masked.  For a refactoring
# that must not change behaviour (issue 31): generated configurations, each bug class injected into
# one of them, boundary-only (stripped) plans, and the nnScaler corpus pairs of PLAN_DIR if given.
# Every case: the text report, --json, --sarif and --dump-stages (the stages as cut and reduced).
#
#   sh bench/same_output.sh OLD_VERDICT NEW_VERDICT [PLAN_DIR]
#
# Exit 1 when an output differs (the first diff is printed), 0 when all are the same.
# Uses /bin/sh, sed and diff only.  About 2 minutes on 2 cores.
set -u
[ $# -ge 2 ] || { echo "usage: sh bench/same_output.sh OLD_VERDICT NEW_VERDICT [PLAN_DIR]" >&2; exit 2; }
OLD=$1
NEW=$2
DIR=${3:-}
OUT=${OUT:-build/bench/same}
rm -rf "$OUT"; mkdir -p "$OUT/plans" "$OUT/old" "$OUT/new"
CONFIGS="llama3 --dp 2 --tp 2 --pp 2 --nm 2|llama3 --dp 2 --tp 2 --pp 2 --nm 2 --sp|llama3 --tp 2 --cp 2|\
llama3 --dp 2 --nm 2 --zero 1 --optimizer adam|llama3 --dp 2 --tp 2 --grad-clip 1.0|mlp --dp 2 --tp 2|moe --tp 4|\
moe --dp 2 --tp 2 --ep 2|moe --tp 2 --pp 2 --nm 2 --sp"

# mask: the figures of the machine, not of the plans
mask() {
  sed -E -e 's/[0-9]+(\.[0-9]+)? ?(s|ms|MB|GB|KB|kB)\b/#\2/g' \
         -e 's/"(seconds|peak_bytes|peak_tracked_bytes|threads|wall_seconds|cpu_seconds)": *[0-9.e+-]+/"\1": #/g' \
         -e 's/"seconds": *\{[^}]*\}/"seconds":#/g' -e 's/time="[0-9.]+"/time="#"/g' -e 's/[0-9]+ thread\(s\)/# thread(s)/g' "$1"
}

# one NAME SINGLE PARALLEL: both binaries, three outputs each
one() {
  for side in old new; do
    [ $side = old ] && bin=$OLD || bin=$NEW
    "$bin" --sm "$2" --pm "$3" --json "$OUT/$side/$1.json" --sarif "$OUT/$side/$1.sarif" \
      --dump-stages "$OUT/$side/$1.stages" >"$OUT/$side/$1.txt" 2>&1
    echo "exit $?" >>"$OUT/$side/$1.txt"
    for f in "$OUT/$side/$1".*; do mask "$f" >"$f.m"; done
  done
  for f in "$OUT/old/$1".*.m; do
    g="$OUT/new/${f##*/}"
    if ! cmp -s "$f" "$g"; then
      echo "DIFFERS: $1 (${f##*/})"; diff "$f" "$g" | head -20; fail=1
    fi
  done
  n=$((n + 1))
}

fail=0; n=0; i=0
IFS='|'
for c in $CONFIGS; do
  i=$((i + 1)); IFS=' '
  # shellcheck disable=SC2086
  set -- $c
  m=$1; shift
  "$NEW" gen --model "$m" "$@" --single "$OUT/plans/c$i.s" --parallel "$OUT/plans/c$i.p" >/dev/null 2>&1 || {
    echo "gen failed: $c"; fail=1; IFS='|'; continue; }
  one "c$i" "$OUT/plans/c$i.s" "$OUT/plans/c$i.p"
  "$NEW" plan strip --keep boundary "$OUT/plans/c$i.p" "$OUT/plans/c$i.strip.p" >/dev/null 2>&1 &&
    one "c$i.strip" "$OUT/plans/c$i.s" "$OUT/plans/c$i.strip.p"
  IFS='|'
done
unset IFS
# every bug class that applies to the first configuration
for b in $("$NEW" mutate --list --tsv | cut -f1 | grep -E '^[0-9]+$'); do
  "$NEW" mutate --bug "$b" -q "$OUT/plans/c1.p" "$OUT/plans/b$b.p" >/dev/null 2>&1 || continue
  one "bug$b" "$OUT/plans/c1.s" "$OUT/plans/b$b.p"
done
if [ -n "$DIR" ]; then
  for s in "$DIR"/*.single.plan; do
    [ -e "$s" ] || continue
    p=${s%.single.plan}.parallel.plan
    [ -e "$p" ] && one "corpus.$(basename "${s%.single.plan}")" "$s" "$p"
  done
fi
if [ $fail = 0 ]; then echo "same output: $n cases, text, --json, --sarif, --dump-stages (outputs in $OUT)"; fi
exit $fail
