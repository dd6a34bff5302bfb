#!/bin/sh
# Benchmark: the CI gate and its proof cache (issue 30, docs/gate.md).  Runs
# `verdict gate` on examples/ci/gate.manifest (the nine generated
# configurations of the bug suite's matrix and four nnScaler corpus pairs)
# three times on one cache directory:
#   cold     the cache empty: every class proven (shared classes once);
#   warm     nothing changed: every EQUIVALENT configuration is unchanged
#            (whole-configuration cache), nothing is proven;
#   changed  one line of the model changed in one configuration (the eps of
#            layer 1's attention norm, in both plans of llama3-dp2-tp2-pp2-nm2,
#            as a change of the model code would): that configuration runs
#            again and re-proves only the classes the change touches;
#   bug      one line of one plan changed (that eps on one rank only, in
#            llama3-sp's parallel plan): the gate fails (exit 1) with the
#            finding, re-proving only the classes the change touches.
# Prints wall and CPU seconds (user + system, children included: the
# pickle conversions), the classes proven EQUIVALENT and stored, and reused
# (from the directory or another configuration of the run), of each run;
# the cold/warm ratio; and the changed configurations' classes.
#
#   sh bench/gate.sh [VERDICT]
#
# Not part of `make test`.  Needs /usr/bin/python3 with python3-msgpack and
# ../shared/corpus.  The machine's load is printed: other processes on the
# cores make the wall times meaningless (the CPU seconds less so).
set -eu
cd "$(dirname "$0")/.."
ROOT=$PWD
V=${1:-${VERDICT:-$ROOT/bin/verdict}}
case $V in /*) ;; *) V=$ROOT/$V ;; esac
W=$(mktemp -d "${TMPDIR:-/tmp}/verdict-gate-bench.XXXXXX")
trap 'rm -rf "$W"' EXIT INT TERM
sh examples/ci/gen_plans.sh "$V" "$W/plans"
# the manifest, with the corpus at its absolute place
sed "s#\.\./\.\./\.\./shared#$(cd .. && pwd)/shared#" examples/ci/gate.manifest >"$W/gate.manifest"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) core(s)"
printf '%-8s %8s %8s %9s %9s %13s %6s\n' run "wall s" "CPU s" "stored" "reused" "unchanged cfg" "exit"
run() { # NAME
  /usr/bin/time -f "%e %U %S" -o "$W/$1.time" "$V" gate "$W/gate.manifest" --cache "$W/cache" --json "$W/$1.json" -q \
    >"$W/$1.out" 2>"$W/$1.err" && rc=0 || rc=$?
  set -- "$1" $(tail -n 1 "$W/$1.time") "$rc"
  st=$(/usr/bin/python3 -c '
import json, sys
j = json.load(open(sys.argv[1]))
c = j["proof_cache"]
print(c["stored"], c["from_directory"] + c["from_process"], c["configurations_unchanged"])' "$W/$1.json")
  # shellcheck disable=SC2086
  set -- "$@" $st
  printf '%-8s %8.2f %8.2f %9s %9s %13s %6s\n' "$1" "$2" "$(echo "$3 $4" | awk '{print $1 + $2}')" "$6" "$7" "$8" "$5"
  echo "$2 $(echo "$3 $4" | awk '{print $1 + $2}')" >"$W/$1.fig"
}
run cold
run warm
# one line of the model: layer 1's attention norm eps, in both plans
/usr/bin/python3 - "$W/plans/base.single.plan" "$W/plans/base.parallel.plan" <<'PY'
import sys, msgpack
for path in sys.argv[1:]:
    p = msgpack.unpackb(open(path, "rb").read(), raw=False, strict_map_key=False)
    n = 0
    for node in p["nodes"]:
        if node.get("name", "").startswith("layers.1.attn_norm") and "eps" in node.get("attrs", {}):
            node["attrs"]["eps"] = 1e-6
            n += 1
    assert n, "no node changed in " + path
    open(path, "wb").write(msgpack.packb(p, use_bin_type=True))
PY
run changed
# one line of one plan: the same eps on one rank only, in llama3-sp's parallel
# plan (a bug: the gate must fail, re-proving only the classes it touches)
/usr/bin/python3 - "$W/plans/sp.parallel.plan" <<'PY'
import sys, msgpack
path = sys.argv[1]
p = msgpack.unpackb(open(path, "rb").read(), raw=False, strict_map_key=False)
for node in p["nodes"]:
    if node.get("name", "").startswith("layers.1.attn_norm") and node.get("op") == "rms_norm":
        node["attrs"]["eps"] = 1e-6
        break
else:
    raise SystemExit("no node changed in " + path)
open(path, "wb").write(msgpack.packb(p, use_bin_type=True))
PY
run bug
show() { # JSON NAME
/usr/bin/python3 - "$1" "$2" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
for c in j["configurations"]:
    if c["name"] == sys.argv[2]:
        s = c["report"]["summary"]
        pc = s.get("proof_cache", {})
        print("  %s: %s%s, %d classes: %d reused, %d solved again"
              % (c["name"], c["outcome"], " " + ", ".join(c["finding_classes"]) if c["finding_classes"] else "",
                 s["classes"], pc.get("reused", 0), s["classes"] - pc.get("reused", 0)))
PY
}
echo "changed configurations:"
show "$W/changed.json" llama3-dp2-tp2-pp2-nm2
show "$W/bug.json" llama3-sp
awk 'NR == FNR { cw = $1; cc = $2; next } { printf "cold / warm: %.1fx wall, %.1fx CPU\n", cw / $1, cc / ($2 > 0 ? $2 : 0.01) }' \
  "$W/cold.fig" "$W/warm.fig"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
