#!/bin/sh
# examples/torch/noise_demo.sh - `make noise-demo`: run the tiny Llama for real (single-device and
# hand-parallel, CPU, float32 and bfloat16), dump every value of the step with tools/torch2plan
# --dump-single/--dump-parallel, and set the parallel run's deviations against the plan's rounding
# bounds with `verdict compare` (docs/noise.md).
#
#   sh examples/torch/noise_demo.sh VERDICT [CONFIG ...]     correct configurations: every tensor
#                                                            must be within rounding (exit 0)
#   sh examples/torch/noise_demo.sh VERDICT bug=NAME [...]   a bug: beyond rounding (exit 1)
# DTYPES (default "float32 bfloat16") selects the precisions.  Configurations: tp2 pp2 dp2 sp
# tp2pp2dp2 tp2pp2dp2sp tied.  Bugs: the plan's (no_allreduce grad_scale pp_recv dp_noavg
# no_sp_gather tie_noreduce) and two outside the plan, on which verdict proves the plans
# EQUIVALENT (lowprec: a TP rank runs a kernel in bfloat16; data: the loader hands a DP replica
# another sample).  Output lands in ${OUT:-build/noise}.  Exit 0 when every run ends as expected.
set -u
VERDICT=${1:?usage: noise_demo.sh VERDICT [CONFIG ...|bug=NAME ...]}
shift
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-$ROOT/build/noise}
DTYPES=${DTYPES:-float32 bfloat16}
mkdir -p "$OUT"
EX=$ROOT/examples/torch

conf() {
  case $1 in
    tp2) echo "2 tp=2" ;;
    pp2) echo "2 pp=2 nm=2" ;;
    dp2) echo "2 dp=2 opt=adam" ;;
    sp) echo "2 tp=2 sp=1" ;;
    tp2pp2dp2) echo "8 tp=2 pp=2 dp=2 nm=2 opt=adam" ;;
    tp2pp2dp2sp) echo "8 tp=2 pp=2 dp=2 nm=2 sp=1 bucket=1" ;;
    tied) echo "8 tp=2 pp=2 dp=2 nm=2 tie=1" ;;
    *) echo "" ;;
  esac
}
bugconf() {
  case $1 in
    no_allreduce|dp_noavg|lowprec|data) echo tp2pp2dp2 ;;
    grad_scale|pp_recv|no_sp_gather) echo tp2pp2dp2sp ;;
    tie_noreduce) echo tied ;;
    *) echo "" ;;
  esac
}
accum() { [ "$1" = bfloat16 ] && echo "--accum fp32"; }

# run NAME CONFIG DTYPE EXPECT(0|1) [bug]
run() {
  name=$1; cf=$(conf "$2"); dt=$3; want=$4; bug=${5:-}
  np=${cf%% *}; sets="--set dtype=$dt"
  for s in ${cf#* }; do sets="$sets --set $s"; done
  [ -n "$bug" ] && sets="$sets --set bug=$bug"
  p=$OUT/$name.$dt
  if ! /usr/bin/python3 "$ROOT/tools/torch2plan" --single "$EX/llama_single.py" --parallel "$EX/llama_parallel.py" \
      --nproc "$np" $sets --out-single "$p.single.plan" --out-parallel "$p.parallel.plan" \
      --dump-single "$p.single.dump" --dump-parallel "$p.parallel.dump" >"$p.capture.log" 2>&1; then
    cat "$p.capture.log"
    echo "$name ($dt): capture failed"
    return 1
  fi
  "$VERDICT" compare --sm "$p.single.plan" --pm "$p.parallel.plan" --single-dump "$p.single.dump" \
    --parallel-dump "$p.parallel.dump" $(accum "$dt") --json "$p.json" --html "$p.html" >"$p.report" 2>&1
  rc=$?
  printf '%s (%s, %s): %s\n' "$name" "$cf" "$dt" "$(head -1 "$p.report")"
  grep -E "^  (plans:|first beyond|The plans|lineage inference|realistic bound /)" "$p.report" | cut -c1-300 | sed 's/^/  /'
  [ "$rc" = "$want" ] || { echo "  expected exit $want, got $rc"; return 1; }
}

fail=0
if [ $# -ge 1 ] && [ "${1#bug=}" != "$1" ]; then
  for b in "$@"; do
    bug=${b#bug=}
    c=$(bugconf "$bug")
    [ -n "$c" ] || { echo "noise_demo.sh: unknown bug '$bug'"; exit 2; }
    for dt in $DTYPES; do
      want=1
      # a bfloat16 run already computes w2 in bfloat16: lowprec changes nothing there
      [ "$bug" = lowprec ] && [ "$dt" = bfloat16 ] && want=0
      run "bug_$bug" "$c" "$dt" $want "$bug" || fail=1
    done
  done
else
  configs=${*:-tp2 pp2 dp2 sp tp2pp2dp2 tp2pp2dp2sp tied}
  for c in $configs; do
    [ -n "$(conf "$c")" ] || { echo "noise_demo.sh: unknown configuration '$c'"; exit 2; }
    for dt in $DTYPES; do run "$c" "$c" "$dt" 0 || fail=1; done
  done
fi
exit $fail
