#!/bin/sh
# Benchmark (issue 28): certificates re-proven by an independent solver.
# For each plan pair: `verdict --certificate DIR` (how many classes verdict
# proved by its normal form, how many by Z3), then `verdict recheck DIR`
# with cvc5 (Debian's binary) and with Z3 (its library, in a fresh context);
# prints one row per pair: stages, classes, verdict's split normal form /
# Z3, verify and certificate seconds, classes re-proven by cvc5 and Z3 and
# their wall seconds, and the disagreements.  Not part of `make test`.
#
#   sh bench/recheck.sh [demo] [bugs] [corpus] [405b]     (default: demo bugs corpus)
#
# demo: the `make demo` pair (llama3 2 layers dp2 tp2 pp2 nm2); bugs: the
# correct configuration of every class of the bug suite (tests/bugs/run_suite.sh:
# its base llama3 dp2 tp2 pp2 nm2 and each generator option the bugs need);
# corpus: 10 nnScaler pairs of ../shared/corpus (ROWS, converted with
# tools/nnscaler2plan under /usr/bin/python3, as tools/corpus_run.sh does);
# 405b: the Llama-3 405B shape of bench/gen405b.sh (long: run under nice).
# THREADS (default 2) solver processes at a time; TIMEOUT (default 300) s per
# solver call.  Exit 1 when any disagreement or changed obligation is found.
set -u
cd "$(dirname "$0")/.."
V=${VERDICT:-$PWD/bin/verdict}
OUT=${OUT:-build/bench/recheck}
T=${THREADS:-2}
TO=${TIMEOUT:-300}
ROWS=${ROWS:-"1 9 13 17 27 44 64 71 73 76"}
CORPUS=${CORPUS:-../shared/corpus/nnscaler}
mkdir -p "$OUT"
WHAT=${*:-demo bugs corpus}
BAD=0

# run CMD... -> runs CMD, output in $OUT/last.out, wall seconds in $S, exit code in $RC
run() {
  t0=$(date +%s.%N)
  "$@" >"$OUT/last.out" 2>&1
  RC=$?
  t1=$(date +%s.%N)
  S=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')
}

printf '%-34s %7s %7s %6s %5s %8s %7s %12s %8s %12s %8s %5s\n' pair stages classes nf z3 verify_s cert_s cvc5 cvc5_s z3lib z3_s dis
row() { # name single parallel
  name=$1; s=$2; p=$3; dir="$OUT/$name.cert"
  rm -rf "$dir"
  run "$V" -q --threads "$T" --sm "$s" --pm "$p" --certificate "$dir"
  vrc=$RC; vs=$S
  st=$(sed -n 's/.*stages \([0-9]*\) (classes solved \([0-9]*\).*/\1/p' "$OUT/last.out" | head -1)
  cl=$(sed -n 's/.*stages \([0-9]*\) (classes solved \([0-9]*\).*/\2/p' "$OUT/last.out" | head -1)
  cs=$(sed -n 's/.*certificate: .* (\([0-9.]*\) MB, \([0-9.]*\) s).*/\2/p' "$OUT/last.out")
  # grep -c prints 0 (and fails) when nothing matches
  nf=$(grep -c '"proved_by": "normal form"' "$dir/manifest.json" 2>/dev/null); nf=${nf:-0}
  z3=$(grep -c '"proved_by": "z3"' "$dir/manifest.json" 2>/dev/null); z3=${z3:-0}
  if [ "$vrc" != 0 ]; then
    echo "$name: verdict exit $vrc: $(head -2 "$OUT/last.out" | tr '\n' ' ')"
    BAD=1
    return
  fi
  run "$V" recheck "$dir" --threads "$T" --timeout "$TO" --sm "$s" --pm "$p" -q
  crc=$RC; cs5=$S
  c5=$(sed -n 's/^recheck: \([0-9]* of [0-9]*\) class.*/\1/p' "$OUT/last.out")
  cd5=$(sed -n 's/.* \([0-9]*\) disagreement(s).*/\1/p' "$OUT/last.out")
  [ "$crc" = 0 ] || { grep -v '^recheck:' "$OUT/last.out" | head -5; BAD=1; }
  cp "$OUT/last.out" "$OUT/$name.cvc5.out"
  run "$V" recheck "$dir" --solver z3 --threads "$T" --timeout "$TO" -q
  zrc=$RC; zs=$S
  zz=$(sed -n 's/^recheck: \([0-9]* of [0-9]*\) class.*/\1/p' "$OUT/last.out")
  zd=$(sed -n 's/.* \([0-9]*\) disagreement(s).*/\1/p' "$OUT/last.out")
  [ "$zrc" = 0 ] || { grep -v '^recheck:' "$OUT/last.out" | head -5; [ "$zrc" = 3 ] || BAD=1; }
  cp "$OUT/last.out" "$OUT/$name.z3.out"
  printf '%-34s %7s %7s %6s %5s %8s %7s %12s %8s %12s %8s %5s\n' "$name" "${st:--}" "${cl:--}" "$nf" "$z3" "$vs" \
    "${cs:--}" "$(echo "$c5" | tr ' ' '_')" "$cs5" "$(echo "$zz" | tr ' ' '_')" "$zs" "$((${cd5:-0} + ${zd:-0}))"
}

for w in $WHAT; do
  case $w in
  demo)
    "$V" gen --model llama3 --layers 2 --hidden 64 --heads 4 --seq 16 --batch 8 --dp 2 --tp 2 --pp 2 --nm 2 \
      --single "$OUT/demo.s" --parallel "$OUT/demo.p" >/dev/null
    row demo "$OUT/demo.s" "$OUT/demo.p" ;;
  bugs)
    BASE="--model llama3 --layers 2 --hidden 16 --heads 4 --seq 8 --batch 8 --dp 2 --tp 2 --pp 2 --nm 2"
    i=0
    for opts in "" "--cp 2" "--grad-clip 0.001" "--loss-mask" "--sp" "--tie-embeddings" "--zero 1 --optimizer adam" \
                "--zero 1" "--cp 2 --sp" "--model moe --ep 2"; do
      i=$((i + 1))
      # shellcheck disable=SC2086
      "$V" gen $BASE $opts --single "$OUT/bug$i.s" --parallel "$OUT/bug$i.p" >/dev/null || { echo "gen $opts failed"; BAD=1; continue; }
      row "bugs ${opts:-base}" "$OUT/bug$i.s" "$OUT/bug$i.p"
    done ;;
  corpus)
    i=0
    grep '^| .*\.pkl |' "$(dirname "$CORPUS")/README.md" | while IFS='|' read -r _ fam par sm pm _; do
      i=$((i + 1))
      case " $ROWS " in *" $i "*) ;; *) continue ;; esac
      sm=$(echo "$sm" | tr -d ' '); pm=$(echo "$pm" | tr -d ' ')
      s="$OUT/c$i.s"; p="$OUT/c$i.p"
      /usr/bin/python3 tools/nnscaler2plan --sm "$CORPUS/$sm" --pm "$CORPUS/$pm" --single "$s" --parallel "$p" \
        >/dev/null 2>&1 || { echo "corpus row $i: conversion failed"; continue; }
      row "corpus $i $(echo "$par" | tr -s ' ' | sed 's/^ //; s/ $//')" "$s" "$p"
      echo "$BAD" >"$OUT/.bad"
    done
    [ "$(cat "$OUT/.bad" 2>/dev/null || echo 0)" = 0 ] || BAD=1 ;;
  405b)
    [ -f build/bench/405b.parallel.plan ] || sh bench/gen405b.sh >/dev/null
    row 405b build/bench/405b.single.plan build/bench/405b.parallel.plan ;;
  *) echo "unknown set '$w' (demo, bugs, corpus, 405b)"; exit 2 ;;
  esac
done
exit $BAD
