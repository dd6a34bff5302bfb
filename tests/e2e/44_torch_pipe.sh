# torch.distributed.pipelining (examples/torch/gpt2_pipe.py: the GPT-2 of gpt2.py in two stages,
# the tied head's copy reduced with the embedding after the schedule) against the single-device
# reference: ScheduleGPipe and Schedule1F1B over 2 microbatches are EQUIVALENT in one round and
# the executor agrees; a schedule that does not average the microbatches' gradients
# (scale_grads=False with a mean loss) is NOT EQUIVALENT, one SCALE finding (factor 2) at a
# gradient's accumulation over the microbatches, with the user's call stack, and the executor
# disagrees; so is one
# that drops the last microbatch's gradient (bug=drop_mb).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/torch_lib.sh"
set -e
for conf in "--set schedule=gpipe" "--set schedule=1f1b"; do
  capture_pair gpt2_single.py gpt2_pipe.py 2 $conf
  pair_equivalent "0 dropped after a failed proof, 1 round"
done
capture_pair gpt2_single.py gpt2_pipe.py 2 --set bug=noscale
pair_not_equivalent "is 2 x its single-device value" "^  findings: 1 " "^   1\. .*SCALE at add 'gpt2.py:[0-9]*'" \
  "diagnosis SCALE (factor 2)"
# the finding carries the user's call stack: the model's line (the gradient's accumulation over
# the microbatches) up to the step (the plan's node `stack`), in the text report and the JSON
expect_exit 1 "$VERDICT" --sm "$TMP/s.plan" --pm "$TMP/p.plan" --json "$TMP/r.json"
expect_in "call stack, innermost first:" "$TMP/out"
grep -A6 "call stack, innermost first:" "$TMP/out" | grep -q "examples/torch/gpt2.py:[0-9]* in forward" ||
  fail "the call stack does not name gpt2.py's forward"
grep -A6 "call stack, innermost first:" "$TMP/out" | grep -q "examples/torch/gpt2_pipe.py:[0-9]* in step" ||
  fail "the call stack does not name gpt2_pipe.py's step"
/usr/bin/python3 - "$TMP/r.json" <<'PY' || fail "the JSON finding has no call stack"
import json, sys
f = json.load(open(sys.argv[1]))["findings"][0]
assert len(f["stack"]) >= 2 and f["stack"][0].startswith("examples/torch/gpt2.py:"), f["stack"]
PY
# 1F1B over 4 microbatches with the last one's gradient dropped (its loss detached, value kept):
# the finding is a missing part of the sum at the line that drops it
capture_pair gpt2_single.py gpt2_pipe.py 2 --set schedule=1f1b --set nm=4 --set bug=drop_mb
pair_not_equivalent "MISSING_REDUCTION at mul 'gpt2_pipe.py:[0-9]*'"
echo ok
