#!/bin/sh
# tools/corpus_run.sh - convert every nnScaler pair of the corpus and check it.
#
#   tools/corpus_run.sh [VERDICT] [CORPUS_DIR] [OUT_DIR]
#
# For each pair listed in CORPUS_DIR/../README.md (default ../shared/corpus):
# tools/nnscaler2plan into OUT_DIR (default build/corpus), `verdict plan
# validate` on both plans, then `verdict exec --sm --pm` (the numeric oracle:
# 0 agree, 1 disagree, 3 unsupported operator) under a time limit
# (EXEC_TIMEOUT seconds, default 120) and a memory limit (EXEC_MEM_KB,
# default 8 GiB): real shapes are large, and a killed run is reported as
# "timeout"/"killed", not as a verdict.  Prints a markdown table.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(dirname "$HERE")
VERDICT=${1:-${VERDICT:-$ROOT/bin/verdict}}
CORPUS=${2:-$ROOT/../shared/corpus/nnscaler}
OUT=${3:-$ROOT/build/corpus}
README=$(dirname "$CORPUS")/README.md
TO=${EXEC_TIMEOUT:-120}
MEM=${EXEC_MEM_KB:-8388608}
mkdir -p "$OUT"
echo "| # | parallel plan | ranks (stored x replicas) | nodes (single / parallel) | tensors (single / parallel) | convert s | unmapped ops | validate | exec | verdict | stages | verify s |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
i=0
grep '^| .*\.pkl |' "$README" | while IFS='|' read -r _ fam par sm pm _; do
  sm=$(echo "$sm" | tr -d ' '); pm=$(echo "$pm" | tr -d ' ')
  i=$((i + 1))
  base=$(printf '%02d_%s' "$i" "${pm%.pkl}")
  s="$OUT/$base.single.plan"; p="$OUT/$base.parallel.plan"
  t0=$(date +%s.%N)
  if ! msg=$(python3 "$HERE/nnscaler2plan" -v --sm "$CORPUS/$sm" --pm "$CORPUS/$pm" --single "$s" --parallel "$p" 2>&1); then
    echo "| $i | ${pm%.pkl} | - | - | - | - | - | convert failed: $msg | - | - | - | - |"; continue
  fi
  t1=$(date +%s.%N)
  ct=$(echo "$t1 $t0" | awk '{printf "%.2f", $1-$2}')
  v1=$("$VERDICT" plan validate "$s" 2>&1); r1=$?
  v2=$("$VERDICT" plan validate "$p" 2>&1); r2=$?
  if [ $r1 -eq 0 ] && [ $r2 -eq 0 ]; then val=ok; else val="FAIL: $(echo "$v1 $v2" | grep -v valid | head -1)"; fi
  rk=$(echo "$v2" | sed -n 's/.*nodes, \([0-9]*\) stored ranks x \([0-9]*\) replicas.*/\1 x \2/p')
  ns=$(echo "$v1" | sed -n 's/.*, \([0-9]*\) tensors, \([0-9]*\) nodes.*/\2 \1/p')
  np=$(echo "$v2" | sed -n 's/.*, \([0-9]*\) tensors, \([0-9]*\) nodes.*/\2 \1/p')
  ex=$( (ulimit -v "$MEM"; timeout "$TO" "$VERDICT" exec -q --sm "$s" --pm "$p") 2>&1 ); rc=$?
  case $rc in
    0) res="agree" ;; 1) res="DISAGREE" ;; 3) res="unsupported: $(echo "$ex" | grep -o "operator '[^']*'" | head -1)" ;;
    124) res="timeout (${TO}s)" ;; 2) res="error: $(echo "$ex" | head -1 | cut -c1-120)" ;; *) res="killed (rc $rc)" ;;
  esac
  um=$(echo "$msg" | sed -n 's/.*unmapped ops: \([^;]*\);.*/\1/p')
  t2=$(date +%s.%N)
  vo=$( (ulimit -v "$MEM"; timeout "$TO" "$VERDICT" -q --stage-timeout 10 --sm "$s" --pm "$p") 2>&1 ); vr=$?
  t3=$(date +%s.%N)
  vt=$(echo "$t3 $t2" | awk '{printf "%.2f", $1-$2}')
  case $vr in
    0|1|3) vd=$(echo "$vo" | head -1); st=$(echo "$vo" | sed -n 's/.*stages \([0-9]*\).*/\1/p' | head -1)
           why=$(echo "$vo" | grep -m1 -E "^-- " | cut -c4-90); [ "$vr" = 0 ] || vd="$vd: $why" ;;
    124) vd="timeout (${TO}s)"; st=- ;; 2) vd="error: $(echo "$vo" | head -1 | cut -c1-100)"; st=- ;; *) vd="killed (rc $vr)"; st=- ;;
  esac
  echo "| $i | ${pm%.pkl} | $rk | ${ns% *} / ${np% *} | ${ns#* } / ${np#* } | $ct | $um | $val | $res | $vd | $st | $vt |"
done
