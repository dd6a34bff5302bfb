#!/bin/sh
# bench/torch.sh - the figures of docs/torch.md: every program pair of examples/torch/demo.sh
# (`demo.sh --list`: the configurations, then the bugs), captured with tools/torch2plan and
# verified with verdict, wall and CPU seconds of each step side by side (CPU = user + sys of the
# step and its children: the capture forks one process per rank).
#
#   sh bench/torch.sh [VERDICT] [NAME ...]     (default: bin/verdict, every configuration and bug)
#
# Prints one row per pair: verdict, exec, capture wall / CPU, verify wall / CPU.  Plans land in
# ${OUT:-build/bench-torch}.  A benchmark, not a test: the exit code is 0 unless a capture fails.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
VERDICT=${1:-$ROOT/bin/verdict}
[ $# -ge 1 ] && shift
OUT=${OUT:-$ROOT/build/bench-torch}
mkdir -p "$OUT"
DEMO="sh $ROOT/examples/torch/demo.sh"
if [ $# -eq 0 ]; then
  set -- $($DEMO --list | sed -n 's/^configurations: //p') \
    $($DEMO --list | sed -n 's/^bugs: //p' | tr ' ' '\n' | sed 's/^/bug=/')
fi
# timed FILE CMD...: runs CMD, writes "wall user sys" to FILE, returns CMD's exit code
timed() { f=$1; shift; /usr/bin/time -f '%e %U %S' -o "$f" "$@"; }
cpu() { tail -1 "$1" | awk '{printf "%.1f s / %.1f s", $1, $2 + $3}'; }   # the last line: time prefixes a non-zero exit
printf '%-26s %-15s %-9s %-20s %-20s\n' pair verdict exec "capture wall / CPU" "verify wall / CPU"
fail=0
for t in "$@"; do
  s=$($DEMO --settings "$t") || { echo "$t: unknown"; fail=1; continue; }
  set -- $s
  single=$1; parallel=$2; np=$3; shift 3
  sets=""
  for x in "$@"; do sets="$sets --set $x"; done
  n=$(printf '%s' "$t" | tr -c 'a-zA-Z0-9_' '_')
  if ! timed "$OUT/$n.ctime" /usr/bin/python3 "$ROOT/tools/torch2plan" --single "$ROOT/examples/torch/$single" \
      --parallel "$ROOT/examples/torch/$parallel" --nproc "$np" $sets \
      --out-single "$OUT/$n.s.plan" --out-parallel "$OUT/$n.p.plan" >"$OUT/$n.capture.log" 2>&1; then
    echo "$t: capture failed (see $OUT/$n.capture.log)"
    fail=1
    continue
  fi
  timed "$OUT/$n.vtime" "$VERDICT" -q --sm "$OUT/$n.s.plan" --pm "$OUT/$n.p.plan" >"$OUT/$n.report" 2>/dev/null
  "$VERDICT" exec -q --sm "$OUT/$n.s.plan" --pm "$OUT/$n.p.plan" >"$OUT/$n.exec" 2>&1
  printf '%-26s %-15s %-9s %-20s %-20s\n' "$t" "$(head -1 "$OUT/$n.report")" \
    "$(head -1 "$OUT/$n.exec" | grep -oE 'DISAGREE|AGREE' | head -1)" "$(cpu "$OUT/$n.ctime")" "$(cpu "$OUT/$n.vtime")"
done
exit $fail
