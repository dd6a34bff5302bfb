#!/bin/sh
# examples/ci/verify.sh TARGET - one CI job of examples/ci/verdict-workflow.yml: capture a program
# pair of examples/torch (single-device and parallel, tools/torch2plan on CPU ranks) and verify the
# pair with every CI output.  Run it from anywhere; it works in the repository root, so the plans'
# source locations are repository paths (examples/torch/llama_parallel.py:184), which GitHub and
# SARIF viewers place on the code.
#
#   TARGET: a configuration of examples/torch/demo.sh (`sh examples/torch/demo.sh --list`: tp2 ...
#           tied, gpt2_ddp ...), expected EQUIVALENT; or bug=NAME (no_allreduce, grad_scale, ...), a
#           hand-written bug expected NOT EQUIVALENT (a demonstration of the annotations: in your
#           own gate every configuration is expected equivalent).
#
# Writes $OUT/TARGET.{single,parallel}.plan, .json, .junit.xml, .sarif (OUT=build/ci by default);
# prints the text report and GitHub annotations (verdict --github), and appends the Markdown step
# summary to $GITHUB_STEP_SUMMARY when it is set.  Exit 0 when the outcome is the expected one,
# 1 when not, 2 for a bad target or a failed capture.  Locally, the same command reproduces a CI
# job:  make && sh examples/ci/verify.sh tp2pp2dp2
set -u
T=${1:?usage: verify.sh CONFIG|bug=NAME}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 2
VERDICT=${VERDICT:-$ROOT/bin/verdict}
OUT=${OUT:-build/ci}
S=$(sh examples/torch/demo.sh --settings "$T") || exit 2
name=$(printf '%s' "$T" | tr -c 'a-zA-Z0-9_' '_')
want=0
case $T in bug=*) want=1 ;; esac
mkdir -p "$OUT"
# shellcheck disable=SC2086
set -- $S
single=$1; parallel=$2; np=$3; shift 3
sets=""
for s in "$@"; do sets="$sets --set $s"; done
# shellcheck disable=SC2086
if ! /usr/bin/python3 tools/torch2plan --single "examples/torch/$single" \
    --parallel "examples/torch/$parallel" --nproc "$np" $sets \
    --out-single "$OUT/$name.single.plan" --out-parallel "$OUT/$name.parallel.plan" >"$OUT/$name.capture.log" 2>&1; then
  cat "$OUT/$name.capture.log"
  echo "verify.sh: $T: the capture failed"
  exit 2
fi
"$VERDICT" -q --sm "$OUT/$name.single.plan" --pm "$OUT/$name.parallel.plan" --json "$OUT/$name.json" \
  --junit "$OUT/$name.junit.xml" --sarif "$OUT/$name.sarif" --github
rc=$?
if [ "$rc" = "$want" ]; then
  echo "verify.sh: $T: exit $rc as expected"
  exit 0
fi
echo "verify.sh: $T: exit $rc, expected $want"
exit 1
