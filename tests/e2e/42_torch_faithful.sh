# The capture is faithful: torch's own step (float64), run on the values verdict's executor gave
# the captured single plan's inputs, weights and optimizer state, ends with the values the
# executor computes for the plan (updated weights and state, loss), to float64 rounding.  And the
# check can fail: one initial weight element changed in the values file changes torch's step.
. "$(dirname "$0")/lib.sh"
set -e
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
T2P="/usr/bin/python3 $ROOT/tools/torch2plan"
S=$ROOT/examples/torch/llama_single.py
for opt in sgd adam; do
  expect_exit 0 $T2P --single "$S" --out-single "$TMP/$opt.plan" --set opt=$opt
  expect_exit 0 "$VERDICT" exec --sm "$TMP/$opt.plan" --dump "$TMP/$opt.values" --seed 7
  expect_exit 0 $T2P --single "$S" --replay "$TMP/$opt.values" --set opt=$opt --tol 1e-12
  expect_in "replay AGREE" "$TMP/out"
done
expect_in "64 tensors" "$TMP/out"
awk '$1 == "initial" && $3 == "layers.0.wq.weight" { $5 = $5 + 0.5 } { print }' "$TMP/adam.values" >"$TMP/bad.values"
expect_exit 1 $T2P --single "$S" --replay "$TMP/bad.values" --set opt=adam
expect_in "replay DISAGREE" "$TMP/out"
echo ok
