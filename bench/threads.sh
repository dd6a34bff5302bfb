#!/bin/sh
# Benchmark: what a second thread buys on large plans (issue 15: "2 threads
# give close to 2x").  Each row is verified with --threads 1 and --threads 2,
# alternating which goes first, REPEAT times; the table prints the best wall
# time of each, their ratio, and each phase's best time (load, graph,
# lineage = inference + table, stages = cut + reduction + classes, solve)
# at 1 -> 2 threads, so a phase that stays serial shows at once.
#
#   sh bench/threads.sh                  every row
#   ROWS="405b dsv3" sh bench/threads.sh only the rows named (mid 405b dsv3 corpus)
#   REPEAT=3 sh bench/threads.sh
#
# Not part of `make test`.  The machine's load is printed before and after:
# another process on the second core makes the ratio meaningless.  The 405B
# and DeepSeek-V3-like plans are generated once into build/bench (as
# bench/gen405b.sh and bench/gendsv3.sh do); the corpus rows need
# /usr/bin/python3 (tools/nnscaler2plan) and ../shared/corpus.
set -u
cd "$(dirname "$0")/.."
V=${VERDICT:-bin/verdict}
OUT=${OUT:-build/bench}
REPEAT=${REPEAT:-1}
ROWS=${ROWS:-"mid 405b dsv3 corpus"}
CORPUS=${CORPUS:-../shared/corpus/nnscaler}
mkdir -p "$OUT/threads"
want() { case " $ROWS " in *" $1 "*) return 0 ;; esac; return 1; }

echo "load before: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) core(s)"
printf '%-40s %8s %8s %7s  %s\n' "configuration" "1 thr s" "2 thr s" "ratio" \
  "phases load/graph/lineage/stages/solve s, 1 thread -> 2 threads"

# one THREADS SINGLE PARALLEL -> "wall load graph lineage stages solve verdict"
one() {
  log="$OUT/threads/run.log"
  t0=$(date +%s.%N)
  "$V" -v --threads "$1" --sm "$2" --pm "$3" >"$log" 2>&1
  t1=$(date +%s.%N)
  awk -v a="$t0" -v b="$t1" '
    /^(EQUIVALENT|NOT EQUIVALENT|INCONCLUSIVE)/ && w == "" { w = $0; gsub(/ /, "_", w) }
    /^  time:/ { for (i = 1; i <= NF; i++) if ($i ~ /^(load|graph|lineage|stages|solve)$/) p[$i] = $(i + 1) + 0 }
    END { printf "%.2f %.2f %.2f %.2f %.2f %.2f %s\n", b - a, p["load"], p["graph"], p["lineage"], p["stages"],
          p["solve"], w }' "$log"
}

# row LABEL SINGLE PARALLEL: best of REPEAT at each thread count, alternating
row() {
  label=$1; s=$2; p=$3
  best1=""; best2=""; k=0
  while [ "$k" -lt "$REPEAT" ]; do
    if [ $((k % 2)) = 0 ]; then r1=$(one 1 "$s" "$p"); r2=$(one 2 "$s" "$p")
    else r2=$(one 2 "$s" "$p"); r1=$(one 1 "$s" "$p"); fi
    best1=$(printf '%s\n%s\n' "$best1" "$r1" | awk 'NF { print }' | sort -g | head -1)
    best2=$(printf '%s\n%s\n' "$best2" "$r2" | awk 'NF { print }' | sort -g | head -1)
    k=$((k + 1))
  done
  printf '%s\n%s\n' "$best1" "$best2" | awk -v l="$label" '
    NR == 1 { split($0, a) } NR == 2 { split($0, b) }
    END {
      v = (a[7] == b[7]) ? a[7] : a[7] "/" b[7] " (verdicts differ)"
      printf "%-40s %8.1f %8.1f %6.2fx  %.1f/%.1f/%.1f/%.1f/%.1f -> %.1f/%.1f/%.1f/%.1f/%.1f  %s\n", l, a[1], b[1],
        a[1] / (b[1] > 0 ? b[1] : 1), a[2], a[3], a[4], a[5], a[6], b[2], b[3], b[4], b[5], b[6], v }'
}

if want mid; then
  "$V" gen --model llama3 --layers 32 --hidden 256 --heads 32 --kv-heads 8 --seq 64 --dp 32 --tp 8 --pp 8 --nm 16 --batch 512 \
    --single "$OUT/threads/mid.s.plan" --parallel "$OUT/threads/mid.p.plan" >/dev/null &&
    row "llama3 32L dp32 tp8 pp8 nm16" "$OUT/threads/mid.s.plan" "$OUT/threads/mid.p.plan"
fi
if want 405b; then
  [ -f "$OUT/405b.parallel.plan" ] || OUT="$OUT" sh bench/gen405b.sh >/dev/null
  row "llama3 405B shape 126L dp64 tp8 pp16 nm16" "$OUT/405b.single.plan" "$OUT/405b.parallel.plan"
fi
if want dsv3; then
  [ -f "$OUT/dsv3.parallel.plan" ] || OUT="$OUT" sh bench/gendsv3.sh >/dev/null
  row "DeepSeek-V3-like 61L dp32 tp8 pp8 nm16" "$OUT/dsv3.single.plan" "$OUT/dsv3.parallel.plan"
fi
if want corpus && [ -d "$CORPUS" ]; then
  C="$OUT/threads"
  if [ -f "$C/l64.p.plan" ] || /usr/bin/python3 tools/nnscaler2plan \
      --sm "$CORPUS/llama3_default_dp1_pp1_tp1_nm1_gbs512_ly2_h32_hi4096_sq128.pkl" \
      --pm "$CORPUS/llama3_default_dp64_pp4_tp8_nm8_gbs512_ly2_h32_hi4096_sq128.pkl" \
      --single "$C/l64.s.plan" --parallel "$C/l64.p.plan" >/dev/null 2>&1; then
    row "nnScaler llama3_default dp64 pp4 tp8 nm8" "$C/l64.s.plan" "$C/l64.p.plan"
  fi
  if [ -f "$C/moe16.p.plan" ] || /usr/bin/python3 tools/nnscaler2plan \
      --sm "$CORPUS/moe_default_dp1_pp1_tp1_nm1_gbs1024_ly2_h16_hi512_sq128_a6_r64.pkl" \
      --pm "$CORPUS/moe_default_dp16_pp2_tp4_nm16_gbs1024_ly2_h16_hi512_sq128_a6_r64.pkl" \
      --single "$C/moe16.s.plan" --parallel "$C/moe16.p.plan" >/dev/null 2>&1; then
    row "nnScaler moe dp16 pp2 tp4 nm16" "$C/moe16.s.plan" "$C/moe16.p.plan"
  fi
fi
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "(ratio: best 1-thread wall over best 2-thread wall, $REPEAT run(s) each, alternating order)"
