# The GPT fused blocks (self_attention, feedforward) that nnscaler2plan
# writes out as registry operators: tools/nnscaler/test_fused.py runs the
# expansion in a small interpreter against a literal transcription of
# nnScaler's block bodies (forward values and finite-difference gradients).
# Both plans go through the same expansion, so the verifier alone could not
# see a wiring mistake in it.
. "$(dirname "$0")/lib.sh"
set -e
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
expect_exit 0 python3 -m unittest tools.nnscaler.test_fused
expect_in "^OK" "$TMP/err"
echo ok
