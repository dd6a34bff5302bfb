# `verdict exec` on reduced shapes: --reduce agrees like --no-reduce on a
# generated Llama-3 pair, says so, and a mutated plan still disagrees.
. "$(dirname "$0")/lib.sh"
set -e
expect_exit 0 "$VERDICT" gen --model llama3 --layers 2 --hidden 32 --heads 4 --seq 16 --batch 8 \
  --dp 2 --tp 2 --pp 2 --nm 2 --single "$TMP/s.plan" --parallel "$TMP/p.plan"
expect_exit 0 "$VERDICT" exec --no-reduce --sm "$TMP/s.plan" --pm "$TMP/p.plan"
if grep -q "reduced" "$TMP/out"; then cat "$TMP/out"; fail "--no-reduce ran on reduced shapes"; fi
expect_exit 0 "$VERDICT" exec --reduce --sm "$TMP/s.plan" --pm "$TMP/p.plan"
expect_in "running on reduced shapes" "$TMP/out"
expect_in "AGREE.*reduced shapes" "$TMP/out"
expect_exit 0 "$VERDICT" exec --reduce -q --sm "$TMP/s.plan" --pm "$TMP/p.plan"
expect_in "AGREE.*reduced shapes" "$TMP/out"
expect_exit 0 "$VERDICT" mutate --bug 1 "$TMP/p.plan" "$TMP/m.plan"
expect_exit 1 "$VERDICT" exec --reduce --sm "$TMP/s.plan" --pm "$TMP/m.plan"
expect_in "DISAGREE" "$TMP/out"
expect_exit 0 "$VERDICT" exec --help
expect_in "--no-reduce" "$TMP/out"
echo ok
