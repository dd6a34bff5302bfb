#!/bin/sh
# tools/corpus_run.sh - convert every nnScaler pair of the corpus, verify it
# and run the numeric oracle on it; prints the markdown table of
# docs/corpus.md.
#
#   tools/corpus_run.sh [VERDICT] [CORPUS_DIR] [OUT_DIR]
#
# For each pair listed in CORPUS_DIR/../README.md (default ../shared/corpus):
# tools/nnscaler2plan into OUT_DIR (default build/corpus), `verdict plan
# validate` on both plans, `verdict --sm --pm` (the verdict: EQUIVALENT, NOT
# EQUIVALENT with the first diagnosis, INCONCLUSIVE) and `verdict exec`
# (the numeric oracle: agree / DISAGREE / unsupported), each under a time
# limit (TIMEOUT seconds, default 900: the dp16 x nm16 MoE pair needs over
# 200) and a memory limit (MEM_KB, default 12 GiB).  ROWS="1 20 72" runs
# only those rows.  STRIP=1 also verifies the parallel plan stripped to its
# boundary (`verdict plan strip --keep boundary`, lineages inferred) and adds
# its verdict and time; a row is then as expected only when both verdicts
# agree (docs/verifier.md section 1b).  A killed run is reported
# as such, never as a verdict.  The last column says whether the row is as
# expected: the same global batch EQUIVALENT and exec agreeing, a different
# global batch a BATCH diagnosis and exec disagreeing.  Exit 0 when every
# row is, 1 otherwise.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(dirname "$HERE")
VERDICT=${1:-${VERDICT:-$ROOT/bin/verdict}}
CORPUS=${2:-$ROOT/../shared/corpus/nnscaler}
OUT=${3:-$ROOT/build/corpus}
README=$(dirname "$CORPUS")/README.md
TO=${TIMEOUT:-900}
MEM=${MEM_KB:-12582912}
ROWS=${ROWS:-}
STRIP=${STRIP:-0}
mkdir -p "$OUT"
FAILED="$OUT/.unexpected"
rm -f "$FAILED"
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }
if [ "$STRIP" = 1 ]; then
  echo "| # | parallel plan | ranks | convert s | verdict | stages (classes) | verify s | stripped verdict | stripped s | exec | exec s | expected |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
else
  echo "| # | parallel plan | ranks | convert s | verdict | stages (classes) | verify s | exec | exec s | expected |"
  echo "|---|---|---|---|---|---|---|---|---|---|"
fi
# verdict_of RC OUTPUT -> the verdict column
verdict_of() {
  case $1 in
    0) echo "EQUIVALENT" ;;
    1) echo "NOT EQUIVALENT: $(echo "$2" | grep -m1 -E '^-- ' | sed 's/^-- //; s/ (.*//' | cut -c1-60)" ;;
    3) echo "INCONCLUSIVE: $(echo "$2" | grep -m1 -E '^-- ' | sed 's/^-- //' | cut -c1-60)" ;;
    124|137) echo "timeout (${TO}s)" ;;
    2) echo "error: $(echo "$2" | head -1 | cut -c1-80)" ;;
    *) echo "killed (rc $1)" ;;
  esac
}
i=0
grep '^| .*\.pkl |' "$README" | while IFS='|' read -r _ fam par sm pm _; do
  sm=$(echo "$sm" | tr -d ' '); pm=$(echo "$pm" | tr -d ' ')
  i=$((i + 1))
  if [ -n "$ROWS" ]; then case " $ROWS " in *" $i "*) ;; *) continue ;; esac; fi
  base=$(printf '%02d_%s' "$i" "${pm%.pkl}")
  s="$OUT/$base.single.plan"; p="$OUT/$base.parallel.plan"
  t0=$(date +%s.%N)
  if ! msg=$(/usr/bin/python3 "$HERE/nnscaler2plan" --sm "$CORPUS/$sm" --pm "$CORPUS/$pm" --single "$s" --parallel "$p" 2>&1); then
    echo "| $i | ${pm%.pkl} | - | - | convert failed: $msg | - | - | - | - | no |"; echo "$i" >>"$FAILED"; continue
  fi
  t1=$(date +%s.%N)
  v2=$("$VERDICT" plan validate "$p" 2>&1) || { echo "| $i | ${pm%.pkl} | - | $(secs "$t0" "$t1") | invalid: $v2 | - | - | - | - | no |"; echo "$i" >>"$FAILED"; continue; }
  rk=$(echo "$v2" | sed -n 's/.*nodes, \([0-9]*\) stored ranks x \([0-9]*\) replicas.*/\1 x \2/p')
  # the verdict
  t2=$(date +%s.%N)
  vo=$( (ulimit -v "$MEM"; timeout -k 5 "$TO" "$VERDICT" -q -v --sm "$s" --pm "$p") 2>&1 ); vr=$?
  t3=$(date +%s.%N)
  st=$(echo "$vo" | sed -n 's/.*stages \([0-9]*\) (classes solved \([0-9]*\).*/\1 (\2)/p' | head -1)
  vd=$(verdict_of "$vr" "$vo")
  scol=""
  if [ "$STRIP" = 1 ]; then
    b="$OUT/$base.boundary.plan"
    "$VERDICT" plan strip --keep boundary "$p" "$b" >/dev/null 2>&1
    t6=$(date +%s.%N)
    so=$( (ulimit -v "$MEM"; timeout -k 5 "$TO" "$VERDICT" -q --sm "$s" --pm "$b") 2>&1 ); sr=$?
    t7=$(date +%s.%N)
    svd=$(verdict_of "$sr" "$so")
    scol=" $svd | $(secs "$t6" "$t7") |"
  fi
  # the numeric oracle
  t4=$(date +%s.%N)
  ex=$( (ulimit -v "$MEM"; timeout -k 5 "$TO" "$VERDICT" exec -q --sm "$s" --pm "$p") 2>&1 ); er=$?
  t5=$(date +%s.%N)
  case $er in
    0) res="agree" ;; 1) res="DISAGREE" ;;
    3) res="inconclusive: $(echo "$ex" | grep -v '^reduced' | head -1 | cut -c1-60)" ;;
    124|137) res="timeout (${TO}s)" ;; 2) res="error: $(echo "$ex" | head -1 | cut -c1-60)" ;; *) res="killed (rc $er)" ;;
  esac
  # expected: the same global batch must be EQUIVALENT, another one BATCH;
  # exec must agree exactly when the verdict is EQUIVALENT
  exp=no
  case "$vd" in
    EQUIVALENT) [ "$res" = agree ] && exp=yes ;;
    "NOT EQUIVALENT: BATCH"*) [ "$res" = DISAGREE ] && exp=yes ;;
  esac
  if [ "$STRIP" = 1 ] && [ "$svd" != "$vd" ]; then exp=no; fi
  echo "| $i | ${pm%.pkl} | ${rk:--} | $(secs "$t0" "$t1") | $vd | ${st:--} | $(secs "$t2" "$t3") |$scol $res | $(secs "$t4" "$t5") | $exp |"
  [ "$exp" = yes ] || echo "$i" >>"$FAILED"
done
if [ -s "$FAILED" ]; then
  echo "corpus_run: rows not as expected: $(tr '\n' ' ' <"$FAILED")" >&2
  exit 1
fi
exit 0
