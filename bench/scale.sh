#!/bin/sh
# Benchmark: how verification cost grows with the parallel configuration.
# One table, every row measured in this run: per-replica stages represented,
# stages cut, classes solved, wall time and peak RSS (/usr/bin/time -v), for
# a Llama-3 style model varied one degree at a time (dp, nm, layers, tp, pp;
# ep for MoE), the Llama-3 405B shape of bench/gen405b.sh, a DeepSeek-V3-like
# MoE shape, and the two large nnScaler corpus pairs, with VERDICT's
# published time (../shared/reference, 30 processes on 32 cores, 1.34 TB)
# beside the rows whose configuration it measured.
#
#   sh bench/scale.sh                 every row
#   ROWS="dp nm" sh bench/scale.sh    only the groups named (dp nm layers tp pp ep 405b dsv3 corpus)
#   THREADS=2 TIMEOUT=1800 sh bench/scale.sh
#
# Not part of `make test`.  Needs /usr/bin/time; the corpus rows need
# /usr/bin/python3 (tools/nnscaler2plan) and ../shared/corpus.
set -u
cd "$(dirname "$0")/.."
V=${VERDICT:-bin/verdict}
OUT=${OUT:-build/bench/scale}
THREADS=${THREADS:-2}
TO=${TIMEOUT:-1800}
ROWS=${ROWS:-"dp nm layers tp pp ep 405b dsv3 corpus"}
REF=${REF:-../shared/reference}
CORPUS=${CORPUS:-../shared/corpus/nnscaler}
mkdir -p "$OUT"

want() { case " $ROWS " in *" $1 "*) return 0 ;; esac; return 1; }

# VERDICT's published total seconds for (file, layers, dp, pp, tp, nm[, routed experts]), or "-".
ref() { # csv layers dp pp tp nm [experts]
  [ -f "$REF/$1" ] || { echo -; return; }
  awk -F, -v l="$2" -v d="$3" -v p="$4" -v t="$5" -v m="$6" -v e="${7:-}" '
    NR > 1 && $2 == l && $3 == d && $4 == p && $5 == t && $6 == m && (e == "" || $12 == e) { s = $17; found = 1 }
    END { if (found) printf "%.0f", s; else printf "-" }' "$REF/$1"
}

printf '%-44s %10s %8s %8s %9s %9s %10s  %s\n' "configuration" "per-rep" "stages" "classes" "wall s" "peak MB" "VERDICT s" "verdict"

# run LABEL VERDICT_S SINGLE PARALLEL
run() {
  label=$1; vref=$2; s=$3; p=$4
  log="$OUT/run.log"
  /usr/bin/time -v -o "$OUT/time" timeout "$TO" "$V" -q -v --threads "$THREADS" --sm "$s" --pm "$p" >"$log" 2>&1
  rc=$?
  secs=$(awk -F': ' '/Elapsed \(wall clock\)/ { n = split($2, a, ":"); t = 0; for (i = 1; i <= n; i++) t = t * 60 + a[i]; print t }' "$OUT/time")
  kb=$(awk -F': ' '/Maximum resident set size/ { print $2 }' "$OUT/time")
  word=$(head -1 "$log")
  [ "$rc" = 124 ] && word="TIMEOUT (${TO}s)"
  stages=$(sed -n 's/^  stages \([0-9]*\) (classes solved \([0-9]*\).*/\1 \2/p' "$log")
  rep=$(sed -n 's/^  replica and microbatch symmetry: the [0-9]* stages stand for \([0-9]*\) .*/\1/p' "$log")
  set -- $stages
  n=${1:--}; c=${2:--}
  [ -n "$rep" ] || rep=$n
  awk -v l="$label" -v r="$rep" -v n="$n" -v c="$c" -v s="${secs:-0}" -v k="${kb:-0}" -v v="$vref" -v w="$word" \
    'BEGIN { printf "%-44s %10s %8s %8s %9.1f %9.0f %10s  %s\n", l, r, n, c, s, k / 1024, v, w }'
}

# gen_run LABEL VERDICT_S GEN-ARGS...
gen_run() {
  label=$1; vref=$2; shift 2
  tag=$(printf '%s' "$label" | tr -c 'a-zA-Z0-9' '_')
  if ! "$V" gen "$@" --single "$OUT/$tag.s.plan" --parallel "$OUT/$tag.p.plan" >"$OUT/gen.log" 2>&1; then
    printf '%-44s  gen failed: %s\n' "$label" "$(head -c 100 "$OUT/gen.log")"
    return
  fi
  run "$label" "$vref" "$OUT/$tag.s.plan" "$OUT/$tag.p.plan"
  rm -f "$OUT/$tag.s.plan" "$OUT/$tag.p.plan"
}

L="--model llama3 --hidden 64 --heads 8 --seq 16 --vocab 128"
if want dp; then
  for dp in 1 16 64; do
    gen_run "llama3 2L tp2 pp2 nm1 dp$dp" - $L --layers 2 --tp 2 --pp 2 --nm 1 --dp $dp --batch $((dp * 2))
  done
fi
if want nm; then
  for nm in 1 16; do
    gen_run "llama3 2L dp1 tp2 pp2 nm$nm" - $L --layers 2 --tp 2 --pp 2 --dp 1 --nm $nm --batch $((nm * 2))
  done
  gen_run "llama3 2L dp64 tp2 pp2 nm16" - $L --layers 2 --tp 2 --pp 2 --dp 64 --nm 16 --batch 2048
fi
if want layers; then
  for ly in 2 32 128; do
    gen_run "llama3 ${ly}L dp2 tp2 pp2 nm2" "$(ref verdict_stats_trends.csv "$ly" 2 2 2 2)" $L --layers "$ly" \
      --tp 2 --pp 2 --dp 2 --nm 2 --batch 8
  done
fi
if want tp; then
  for tp in 1 8; do
    gen_run "llama3 4L dp16 pp4 tp$tp nm8" "$(ref verdict_stats_trends.csv 4 16 4 "$tp" 8)" $L --layers 4 \
      --tp "$tp" --pp 4 --dp 16 --nm 8 --batch 256
  done
fi
if want pp; then
  for pp in 2 16; do
    gen_run "llama3 32L dp2 tp2 pp$pp nm2" "$(ref verdict_stats_trends.csv 32 2 "$pp" 2 2)" $L --layers 32 \
      --tp 2 --pp "$pp" --dp 2 --nm 2 --batch 8
  done
fi
M="--model moe --hidden 64 --heads 4 --seq 16 --vocab 128"
if want ep; then
  for ep in 1 4; do
    gen_run "moe 2L dp4 tp1 pp2 nm2 ep$ep 8x2 experts" - $M --layers 2 --dp 4 --tp 1 --pp 2 --nm 2 --ep "$ep" \
      --experts 8 --topk 2 --batch $((4 * ep * 2 * 2))
  done
fi
if want 405b; then
  gen_run "llama3 405B shape 126L dp64 tp8 pp16 nm16" "$(ref verdict_stats_large.csv 126 64 16 8 16)" \
    --model llama3 --layers 126 --hidden 1024 --heads 128 --kv-heads 8 --ffn 2048 --seq 128 --batch 1024 \
    --vocab 1024 --dp 64 --tp 8 --pp 16 --nm 16
fi
if want dsv3; then
  # dp32 with ep8 inside it: --dp 4 --ep 8 (bench/gendsv3.sh), 2048 ranks
  gen_run "DeepSeek-V3-like 61L dp32(4x ep8) tp8 pp8 nm16" "$(ref verdict_stats_large.csv 61 32 8 8 16 256)" \
    --model moe --layers 61 --hidden 512 --heads 128 --seq 128 --batch 1024 --vocab 1024 --experts 256 \
    --topk 8 --dp 4 --tp 8 --pp 8 --nm 16 --ep 8
fi
if want corpus && [ -d "$CORPUS" ]; then
  conv() { # tag single.pkl parallel.pkl
    [ -f "$OUT/$1.p.plan" ] && return 0
    /usr/bin/python3 tools/nnscaler2plan --sm "$CORPUS/$2" --pm "$CORPUS/$3" --single "$OUT/$1.s.plan" \
      --parallel "$OUT/$1.p.plan" >"$OUT/conv.log" 2>&1
  }
  if conv l64 llama3_default_dp1_pp1_tp1_nm1_gbs512_ly2_h32_hi4096_sq128.pkl \
      llama3_default_dp64_pp4_tp8_nm8_gbs512_ly2_h32_hi4096_sq128.pkl; then
    run "nnScaler llama3_default dp64 pp4 tp8 nm8 2L" - "$OUT/l64.s.plan" "$OUT/l64.p.plan"
  fi
  if conv moe16 moe_default_dp1_pp1_tp1_nm1_gbs1024_ly2_h16_hi512_sq128_a6_r64.pkl \
      moe_default_dp16_pp2_tp4_nm16_gbs1024_ly2_h16_hi512_sq128_a6_r64.pkl; then
    run "nnScaler moe dp16 pp2 tp4 nm16 2L" - "$OUT/moe16.s.plan" "$OUT/moe16.p.plan"
  fi
fi
echo "(per-rep: per-replica stages proven; stages: stages cut; classes: stages solved; VERDICT: its published"
echo " total for the same configuration with a 32-layer or larger model where the layer count differs,"
echo " measured with 30 processes on 32 cores; this table: $THREADS thread(s) on $(nproc) core(s))"
