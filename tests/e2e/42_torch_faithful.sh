# The capture is faithful: torch's own step (float64), run on the values verdict's executor gave
# the captured single plan's inputs, weights and optimizer state, ends with the values the
# executor computes for the plan (updated weights and state, loss), to float64 rounding.  And the
# check can fail: one initial weight element changed in the values file changes torch's step.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/torch_lib.sh"
set -e
for opt in sgd adam; do
  replay_faithful llama_single.py 7 --set opt=$opt
done
expect_in "64 tensors" "$TMP/out"
# $TMP/v: the values of the last run, Adam's
awk '$1 == "initial" && $3 == "layers.0.wq.weight" { $5 = $5 + 0.5 } { print }' "$TMP/v" >"$TMP/bad.values"
expect_exit 1 $T2P --single "$EX/llama_single.py" --replay "$TMP/bad.values" --set opt=adam
expect_in "replay DISAGREE" "$TMP/out"
echo ok
