# verdict noise and verdict compare (docs/noise.md) on a real run of the tiny Llama of
# examples/torch (TP2, float32, CPU) whose values tools/torch2plan dumps: the correct program is
# within rounding everywhere (exit 0); the same dumps edited give the other outcomes: a value of a
# tensor that must be bit-identical changed (beyond rounding, exit 1, named), a record removed
# (missing, exit 1), a truncated record and a wrong header (bad input, exit 2, the line and the
# field named).  A bug outside the plan (TP rank 1 runs its MLP down projection in bfloat16) on
# a plan verdict proves EQUIVALENT is beyond rounding and the report says the difference comes
# from outside the plan.  A bug in the plan (SP's missing all_gather) is attributed to its first point
# of departure, the node the verifier's finding names.  `verdict noise --json` gives every tensor's bounds and bit-identical flag.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/torch_lib.sh"
set -e
cap() { # cap NAME [--set ...]: plans and dumps of a TP2 float32 run
  n=$1; shift
  expect_exit 0 $T2P --single "$EX/llama_single.py" --parallel "$EX/llama_parallel.py" --nproc 2 \
    --set tp=2 --set dtype=float32 "$@" --out-single "$TMP/$n.s.plan" --out-parallel "$TMP/$n.p.plan" \
    --dump-single "$TMP/$n.s.dump" --dump-parallel "$TMP/$n.p.dump"
}
cmp_() { # cmp_ NAME PDUMP EXIT [options]
  n=$1 pd=$2 want=$3; shift 3
  expect_exit "$want" "$VERDICT" compare --sm "$TMP/$n.s.plan" --pm "$TMP/$n.p.plan" --single-dump "$TMP/$n.s.dump" \
    --parallel-dump "$pd" "$@"
}
cap ok
cmp_ ok "$TMP/ok.p.dump" 0 --json "$TMP/ok.json" --html "$TMP/ok.html"
# every tensor within rounding (the count follows the capture's rewrites: 414 at 9b3fb51)
expect_in "^compare: WITHIN ROUNDING (\([0-9][0-9]*\) tensors: \1 within rounding, 0 beyond, 0 missing" "$TMP/out"
expect_in "plans: EQUIVALENT" "$TMP/out"
expect_in "realistic bound / observed on the [0-9]* tensors that differ" "$TMP/out"
python3 - "$TMP/ok.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
assert j["mode"] == "compare" and j["summary"]["beyond"] == 0 and j["first_beyond"] is None, j["summary"]
t = j["tensors"]
assert len(t) > 300 and all(x["status"] == "within rounding" for x in t)
assert any(x["bit_identical"] for x in t) and any(not x["bit_identical"] and x["observed"] > 0 for x in t)
r = j["summary"]["ratio"]
assert 1 <= r["median"] <= 20, r   # the realistic bound is near the observed deviation, not 1.0
PY
grep -q "<svg" "$TMP/ok.html" || fail "no plot in the HTML report"

# beyond rounding: tok.weight's initial value on rank 0 (bit-identical by construction) changed
awk '$1 == "v" && $2 == 1000001 && $4 == "first" && !done { $6 = $6 * 1.001; done = 1 } { print }' \
  "$TMP/ok.p.dump" >"$TMP/beyond.dump"
cmp_ ok "$TMP/beyond.dump" 1 --no-verify
expect_in "^compare: BEYOND ROUNDING" "$TMP/out"
expect_in "first beyond rounding: #0 tok.weight (weight): observed .*must be bit-identical" "$TMP/out"
# missing: a record of the parallel run removed
awk '!($1 == "v" && $2 == 1000001 && $4 == "first")' "$TMP/ok.p.dump" >"$TMP/missing.dump"
cmp_ ok "$TMP/missing.dump" 1 --no-verify
expect_in "^compare: MISSING VALUES" "$TMP/out"
expect_in "first missing: #0 tok.weight: parallel tensor 1000001 (replica 0) has no value" "$TMP/out"
expect_in "without a bound" "$TMP/out"
# bad input: a record shorter than announced, a wrong header, a dump of the wrong kind
awk 'NR == 3 { $5 = $5 + 1 } { print }' "$TMP/ok.p.dump" >"$TMP/short.dump"
cmp_ ok "$TMP/short.dump" 2 --no-verify
expect_in "short.dump.*line 3.*values.*expected [0-9]* values" "$TMP/err"
printf 'verdict-dump 9 parallel\n' >"$TMP/header.dump"
cmp_ ok "$TMP/header.dump" 2 --no-verify
expect_in "header.dump.*line 1.*header" "$TMP/err"
cmp_ ok "$TMP/ok.s.dump" 2 --no-verify
expect_in "expected a parallel dump" "$TMP/err"

# noise: every tensor with its bounds (a stated scale), bit-identical ones marked
expect_exit 0 "$VERDICT" noise --sm "$TMP/ok.s.plan" --pm "$TMP/ok.p.plan" --dtype bf16 --accum fp32 --scale 0.5 \
  --json "$TMP/noise.json" -q
expect_in "evaluated for inputs of scale 0.5" "$TMP/out"
python3 - "$TMP/noise.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
assert j["mode"] == "noise" and j["dtype"] == "bf16" and j["accum"] == "fp32"
for x in j["tensors"]:
    assert set(("name", "realistic", "worst", "bit_identical")) <= set(x), x
    assert not x["bit_identical"] or (x["realistic"] == 0 and x["worst"] == 0), x
assert any(x["bit_identical"] for x in j["tensors"]) and any(not x["bit_identical"] for x in j["tensors"])
PY
expect_exit 2 "$VERDICT" noise --sm "$TMP/ok.s.plan" --pm "$TMP/ok.p.plan" --dtype fp8

# outside the plan: TP rank 1 computes w2 in bfloat16; the plan is EQUIVALENT, the run is not
cap lowprec --set bug=lowprec
cmp_ lowprec "$TMP/lowprec.p.dump" 1
expect_in "^compare: BEYOND ROUNDING" "$TMP/out"
expect_in "plans: EQUIVALENT" "$TMP/out"
# the first tensor beyond rounding is on the MLP's line (the one lowprec runs in bfloat16)
mlp_line=$(($(grep -n '^def mlp' "$ROOT/examples/torch/llama_single.py" | cut -d: -f1) + 1))
expect_in "first beyond rounding: #[0-9]* llama_single.py:$mlp_line " "$TMP/out"
expect_in "The plans are proven EQUIVALENT, so this difference does not come from the plan" "$TMP/out"

# a bug in the plan whose first beyond-rounding tensor is computed from values with no single-device
# counterpart (SP without its all_gather: the concat of zero buffers): compare attributes it to the
# first point of departure, the concat, the node the verifier's finding names
cap nosp --set sp=1 --set bug=no_sp_gather
cmp_ nosp "$TMP/nosp.p.dump" 1 --json "$TMP/nosp.json"
expect_in "^compare: BEYOND ROUNDING" "$TMP/out"
expect_in "plans: NOT EQUIVALENT" "$TMP/out"
expect_in "first point of departure: concat 'llama_parallel.py:[0-9]*' on rank 0: .*(the node where lineage inference stopped" "$TMP/out"
expect_exit 1 "$VERDICT" --sm "$TMP/nosp.s.plan" --pm "$TMP/nosp.p.plan"
dep=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1]))["departure"]; assert d["inference_stopped_here"]; print(d["node"].split(" on rank")[0])' "$TMP/nosp.json")
grep -qF "WRONG_VALUE at $dep" "$TMP/out" || fail "the departure ($dep) is not the node the finding names"
echo "ok   noise and compare: within, beyond, missing, bad input; a bug outside the plan; a departure"
