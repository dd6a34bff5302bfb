# Issue 3: every configuration of the generators' matrix verifies as
# EQUIVALENT, and the numeric executor agrees on each.
. "$(dirname "$0")/lib.sh"
set -e
SIZES="--layers 2 --hidden 32 --heads 4 --seq 8 --batch 4"
check() { # gen args...
  expect_exit 0 "$VERDICT" gen "$@" --single "$TMP/s.plan" --parallel "$TMP/p.plan"
  expect_exit 0 "$VERDICT" -q --sm "$TMP/s.plan" --pm "$TMP/p.plan"
  expect_in "^EQUIVALENT" "$TMP/out"
  expect_in "^  proof: \([0-9]*\) stages* (one proof obligation each): \1 proven equivalent$" "$TMP/out"
  expect_exit 0 "$VERDICT" exec --sm "$TMP/s.plan" --pm "$TMP/p.plan"
  echo "ok: $*"
}
for model in mlp llama3 moe; do
  for dp in 1 2; do for tp in 1 2; do for pp in 1 2; do for nm in 1 2; do
    check --model $model $SIZES --dp $dp --tp $tp --pp $pp --nm $nm
  done; done; done; done
done
check --model llama3 $SIZES --tp 4
check --model llama3 $SIZES --pp 4 --layers 4 --nm 2
check --model llama3 $SIZES --dp 4
check --model llama3 $SIZES --tp 2 --sp
check --model llama3 $SIZES --tp 2 --sp --pp 2 --nm 2
check --model llama3 $SIZES --cp 2
check --model llama3 $SIZES --cp 2 --tp 2
check --model moe $SIZES --ep 2
check --model moe $SIZES --ep 2 --tp 2
check --model llama3 $SIZES --dp 2 --zero 1 --optimizer adam
check --model moe $SIZES --dp 2 --zero 1 --optimizer adam
check --model llama3 $SIZES --dp 2 --tp 2 --grad-clip 1.0 --loss sum
check --model llama3 $SIZES --heads 4 --kv-heads 2 --tp 2
# tied embeddings (one weight for the embedding and the LM head; pp > 1: a
# copy per end stage, gradients all-reduced across them) and the masked loss
# (global token count all-reduced over dp replicas and cp ranks)
check --model llama3 $SIZES --dp 2 --tp 2 --nm 2 --tie-embeddings
check --model llama3 $SIZES --dp 2 --tp 2 --pp 2 --nm 2 --tie-embeddings
check --model llama3 $SIZES --dp 2 --tp 2 --pp 2 --nm 2 --loss-mask
check --model llama3 $SIZES --cp 2 --loss-mask
