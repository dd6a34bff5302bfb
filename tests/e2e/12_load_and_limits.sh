#!/bin/sh
# End-to-end: verdicts do not depend on the machine's load or the thread
# count (issue 14), and the solver limits are options with explicit units.
#  - the MoE tp4 pair (INCONCLUSIVE before the polynomial normal form) and a
#    llama3 zero+adam pair are verified idle with 1 and 2 threads, then under
#    heavy CPU contention (one busy loop per core, started here and killed by
#    pid); the first line of the report (the verdict) and the stage counts
#    must be identical in every run;
#  - --stage-timeout takes fractional seconds and refuses 0, --stage-budget
#    likewise; 'none' is accepted for both;
#  - a budget too small for the solver gives INCONCLUSIVE naming the limit
#    (text and JSON), never EQUIVALENT.
. "$(dirname "$0")/lib.sh"
set -e
"$VERDICT" gen --model moe --layers 2 --tp 4 --single "$TMP/ms.plan" --parallel "$TMP/mp.plan" >/dev/null
"$VERDICT" gen --model llama3 --layers 2 --dp 2 --tp 2 --zero 1 --optimizer adam \
  --single "$TMP/ls.plan" --parallel "$TMP/lp.plan" >/dev/null

summary() { # plan-prefix threads -> verdict line + stage counts
  "$VERDICT" -q --sm "$TMP/$1s.plan" --pm "$TMP/$1p.plan" --threads "$2" >"$TMP/run.out" 2>&1 || true
  head -2 "$TMP/run.out"
}

for p in m l; do
  summary $p 2 >"$TMP/$p.idle2"
  summary $p 1 >"$TMP/$p.idle1"
  head -1 "$TMP/$p.idle2" | grep -qx "EQUIVALENT" || { cat "$TMP/run.out"; fail "$p pair not EQUIVALENT idle"; }
  cmp -s "$TMP/$p.idle1" "$TMP/$p.idle2" || fail "$p pair: 1 and 2 threads differ"
done

# Heavy contention: a busy loop per core for the duration of the loaded runs.
busy=""
stop_busy() { for b in $busy; do kill "$b" 2>/dev/null || true; done; busy=""; }
trap 'stop_busy; rm -rf "$TMP"' EXIT
for i in 1 2; do
  sh -c 'while :; do :; done' &
  busy="$busy $!"
done
for p in m l; do
  summary $p 2 >"$TMP/$p.busy2"
  summary $p 1 >"$TMP/$p.busy1"
done
stop_busy
for p in m l; do
  cmp -s "$TMP/$p.idle2" "$TMP/$p.busy2" || { diff "$TMP/$p.idle2" "$TMP/$p.busy2"; fail "$p pair: verdict changed under load (2 threads)"; }
  cmp -s "$TMP/$p.idle1" "$TMP/$p.busy1" || { diff "$TMP/$p.idle1" "$TMP/$p.busy1"; fail "$p pair: verdict changed under load (1 thread)"; }
done

# Limit options: units explicit, 0 refused, fractions and 'none' accepted.
expect_exit 2 "$VERDICT" --sm "$TMP/ms.plan" --pm "$TMP/mp.plan" --stage-timeout 0
expect_in "expected seconds > 0" "$TMP/err"
expect_exit 2 "$VERDICT" --sm "$TMP/ms.plan" --pm "$TMP/mp.plan" --stage-budget 0
expect_in "stage-budget" "$TMP/err"
expect_exit 2 "$VERDICT" --sm "$TMP/ms.plan" --pm "$TMP/mp.plan" --stage-timeout 1s
expect_exit 0 "$VERDICT" -q --sm "$TMP/ms.plan" --pm "$TMP/mp.plan" --stage-timeout 2.5 --stage-budget 0.5
expect_exit 0 "$VERDICT" -q --sm "$TMP/ms.plan" --pm "$TMP/mp.plan" --stage-timeout none --stage-budget none

# Without the normal form the MoE stages go to Z3; a tiny budget makes them
# INCONCLUSIVE with the limit named, deterministically, never EQUIVALENT.
expect_exit 3 "$VERDICT" --sm "$TMP/ms.plan" --pm "$TMP/mp.plan" --no-fast-path --stage-budget 0.001 \
  --json "$TMP/r.json"
expect_in "budget exhausted" "$TMP/out"
expect_in "operators: " "$TMP/out"
expect_in '"limit":"budget"' "$TMP/r.json"
echo ok
