# A GPT-2 written the natural way (examples/torch/gpt2.py: nn.LayerNorm, learned positions from
# torch.arange, a causal masked_fill of a boolean buffer or F.scaled_dot_product_attention, tanh
# GELU, a tied head, F.cross_entropy) trained on one device and with PyTorch's
# DistributedDataParallel (its C++ bucketed reducer):
#  - the single-device capture is faithful (torch's own step on the executor's values agrees),
#    with SGD and with AdamW (weight decay), with either attention kernel;
#  - DDP over 2 ranks is EQUIVALENT and agrees under the executor, in one bucket and in several,
#    and with gradient accumulation over 2 microbatches under no_sync();
#  - the loss multiplied by the world size before backward (DDP averages already), and
#    accumulation that does not divide by the microbatch count, are NOT EQUIVALENT, and the
#    executor disagrees;
#  - a parameter left out of DDP's reducer (bug=ignored) is NOT EQUIVALENT in about a second, a
#    MISSING_REDUCTION at that parameter's optimizer update (the step's opt.step() line), whose
#    input is one replica's share of the mean gradient.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/torch_lib.sh"
set -e
for conf in "--set opt=adamw" "--set attn=sdpa"; do
  replay_faithful gpt2_single.py 3 $conf
done
cap() {
  capture_pair gpt2_single.py gpt2_ddp.py 2 --set dp=2 "$@"
  expect_in "1 stored ranks x 2 replicas" "$TMP/out"
}
for conf in "--set opt=sgd" "--set attn=sdpa --set opt=adamw --set bucket_mb=0.002" "--set accum=2"; do
  cap $conf
  pair_equivalent "0 dropped after a failed proof, 1 round"
done
# bugs: the loss scaled by the world size; accumulation under no_sync() without dividing by
# the microbatch count
for conf in "--set bug=loss_scale" "--set accum=2 --set bug=accum_nodiv"; do
  cap $conf
  pair_not_equivalent
done
# a parameter DDP does not reduce: the finding is the missing reduction at its update, not a
# wrong value at the loss (before: WRONG_VALUE at nll_loss_backward after 92 s)
cap --set bug=ignored
expect_exit 1 "$VERDICT" --sm "$TMP/s.plan" --pm "$TMP/p.plan"
expect_in "^ *1\. .*MISSING_REDUCTION at add 'gpt2_ddp.py:$(grep -n 'opt.step()' "$EX/gpt2_ddp.py" | head -1 | cut -d: -f1)'" "$TMP/out"
expect_in "one copy's share of a mean (part 0 of 2, times 2)" "$TMP/out"
expect_in "target: single 'h.1.mlp.fc.weight'" "$TMP/out"
cap --set accum=2 --set bug=accum_nodiv
# the finding carries the user's call stack: the model's line and the step's call of the model
# (the plan's node `stack`: gpt2.py:92 <- gpt2_ddp.py accumulate <- step), in the text report and the JSON
expect_exit 1 "$VERDICT" --sm "$TMP/s.plan" --pm "$TMP/p.plan" --json "$TMP/r.json"
expect_in "call stack, innermost first:" "$TMP/out"
grep -A6 "call stack, innermost first:" "$TMP/out" | grep -q "examples/torch/gpt2.py:[0-9]* in forward" ||
  fail "the call stack does not name gpt2.py's forward"
grep -A6 "call stack, innermost first:" "$TMP/out" | grep -q "examples/torch/gpt2_ddp.py:[0-9]* in step" ||
  fail "the call stack does not name gpt2_ddp.py's step"
/usr/bin/python3 - "$TMP/r.json" <<'PY' || fail "the JSON finding has no call stack"
import json, sys
f = json.load(open(sys.argv[1]))["findings"][0]
assert len(f["stack"]) >= 2 and f["stack"][0].startswith("examples/torch/gpt2.py:"), f["stack"]
PY
echo ok
