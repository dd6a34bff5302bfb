#!/bin/sh
# Runs the main paths (gen, plan validate/stats, exec, verify, mutate, gate) under
# valgrind and fails on any memory error or definite/indirect leak.
# `make valgrind`; not part of `make test` (slow).
set -eu
V=${1:-bin/verdict}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
vg() { valgrind -q --leak-check=full --errors-for-leak-kinds=definite,indirect --error-exitcode=9 "$V" "$@" >/dev/null 2>"$T/vg.err" || {
  rc=$?; [ $rc -ne 9 ] && [ $rc -le 3 ] && return 0; cat "$T/vg.err"; echo "valgrind: verdict $*: exit $rc"; exit 1; }; }
vg gen --model llama3 --layers 1 --hidden 16 --heads 2 --seq 4 --batch 4 --dp 2 --tp 2 --pp 1 --nm 2 --single "$T/s.plan" --parallel "$T/p.plan"
vg plan validate "$T/p.plan"
vg plan stats "$T/p.plan"
vg plan dump --json "$T/p.plan"
vg exec --sm "$T/s.plan" --pm "$T/p.plan"
vg -q --threads 1 --sm "$T/s.plan" --pm "$T/p.plan"
"$V" mutate --bug 7 "$T/p.plan" "$T/b.plan" >/dev/null
vg -q --threads 1 --sm "$T/s.plan" --pm "$T/b.plan" --json "$T/r.json" --junit "$T/r.xml" --sarif "$T/r.sarif" --github \
  --summary "$T/r.md"
vg exec --reduce --sm "$T/s.plan" --pm "$T/p.plan"
# the reports of compacted class members (tests/e2e/18_compact_stages.sh): a MoE plan whose
# JUnit lists every proven tensor and whose last stage, a class member, is drawn
"$V" gen --model moe --dp 2 --tp 2 --ep 2 --single "$T/ms.plan" --parallel "$T/mp.plan" >/dev/null
N=$("$V" -q --sm "$T/ms.plan" --pm "$T/mp.plan" -v 2>/dev/null | sed -n 's/.*proof: \([0-9]*\) stages.*/\1/p')
vg -q --sm "$T/ms.plan" --pm "$T/mp.plan" --junit "$T/m.xml" --dot-stage $((N - 1)) "$T/m.dot"
# the gate and the proof cache: a cold run, then one that takes the classes
# and the unchanged configuration from the directory (docs/gate.md)
printf '[ok]\nsingle = s.plan\nparallel = p.plan\nexpect = equivalent\n[bug]\nsingle = s.plan\nparallel = b.plan\nexpect = not-equivalent\n' >"$T/g.manifest"
XDG_CONFIG_HOME="$T/cfg" vg gate "$T/g.manifest" --cache "$T/cache" --threads 1 --json "$T/g.json"
XDG_CONFIG_HOME="$T/cfg" vg gate "$T/g.manifest" --cache "$T/cache" --threads 1 --json "$T/g.json"
# an imported nnScaler pair (when the shared corpus is there), and its BATCH twin
C=$(dirname "$0")/../../shared/corpus/nnscaler
if [ -d "$C" ]; then
  CONV=$(dirname "$0")/../tools/nnscaler2plan
  /usr/bin/python3 "$CONV" --sm "$C/llama3adpt_mgener_dp1_pp1_tp1_nm1_gbs16_ly1_h32_hi4096_sq128.pkl" \
    --pm "$C/llama3adpt_mgener_dp1_pp2_tp1_nm2_gbs16_ly1_h32_hi4096_sq128.pkl" --single "$T/ns.plan" --parallel "$T/np.plan"
  vg -q --threads 1 --sm "$T/ns.plan" --pm "$T/np.plan"
  vg exec -q --sm "$T/ns.plan" --pm "$T/np.plan"
  /usr/bin/python3 "$CONV" --sm "$C/gpt_mgener_dp1_pp1_tp1_nm1_gbs16_dim1024_ly2_h16_hi1024_sq1024.pkl" \
    --pm "$C/gpt_mgener_dp8_pp1_tp1_nm1_gbs16_dim1024_ly2_h16_hi1024_sq1024.pkl" --single "$T/bs.plan" --parallel "$T/bp.plan"
  vg -q --sm "$T/bs.plan" --pm "$T/bp.plan"
  vg exec -q --sm "$T/bs.plan" --pm "$T/bp.plan"
fi
head -c 2000 "$T/p.plan" >"$T/t.plan"
vg plan validate "$T/t.plan"
echo "valgrind: main paths clean"
