#!/bin/sh
# Benchmark: verify a 32-layer Llama-3 style plan pair at dp2 tp2 pp2 nm2
# (VERDICT's demo configuration; the paper reports about 15 s with 30 worker
# processes for it) with 1 and 2 threads, side by side in one run, plus the
# same with symmetry reuse off to show what the canonical classes save.
# Prints wall time, peak RSS, stage and class counts.  Not part of `make
# test`: run `sh bench/verify_llama3_32.sh` after `make`.
set -eu
cd "$(dirname "$0")/.."
V=${VERDICT:-bin/verdict}
OUT=${OUT:-build/bench}
REPS=${REPS:-3}
mkdir -p "$OUT"
"$V" gen --model llama3 --layers 32 --hidden 64 --heads 4 --seq 16 --batch 8 \
  --dp 2 --tp 2 --pp 2 --nm 2 --single "$OUT/l32.single.plan" --parallel "$OUT/l32.parallel.plan" >/dev/null
echo "llama3 32 layers, hidden 64, dp2 tp2 pp2 nm2 (best of $REPS runs each)"
printf '%-26s %9s %12s  %s\n' "run" "wall s" "peak RSS MB" "verdict / stages"
run() { # label args...
  label=$1; shift
  best=""; mem=""
  i=0
  while [ $i -lt "$REPS" ]; do
    /usr/bin/time -f "%e %M" -o "$OUT/time" "$V" -q "$@" --sm "$OUT/l32.single.plan" \
      --pm "$OUT/l32.parallel.plan" >"$OUT/run.out" 2>&1 || true
    read -r secs kb <"$OUT/time"
    if [ -z "$best" ] || awk -v a="$secs" -v b="$best" 'BEGIN { exit !(a < b) }'; then best=$secs; mem=$kb; fi
    i=$((i + 1))
  done
  summary=$(head -2 "$OUT/run.out" | tr -s ' \n' ' ')
  awk -v l="$label" -v s="$best" -v k="$mem" -v v="$summary" \
    'BEGIN { printf "%-26s %9.2f %12.1f  %s\n", l, s, k / 1024, v }'
}
run "1 thread" --threads 1
run "2 threads" --threads 2
run "2 threads, no reuse" --threads 2 --no-reuse
