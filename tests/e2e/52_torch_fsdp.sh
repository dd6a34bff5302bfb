# FSDP2 as users write it (examples/torch/gpt2_fsdp.py: fully_shard on every block and on the
# root, the model code of gpt2.py unchanged) against gpt2_single.py, on gloo:
#  - SGD, SGD with momentum, AdamW with clip_grad_norm_ over the DTensor gradients, and SGD on
#    dp4 (FSDP then divides before and after the reduce-scatter by 2 each): EQUIVALENT
#    and the executor agrees; the shard layout comes from FSDP's DTensor parameters (cap.params)
#    and the optimizer state is DTensors too;
#  - the reduce-scatter summing where the loss is a mean (the gradient divide factor set to 1):
#    NOT EQUIVALENT, the report says the optimizer's input is 2 x its single-device value, and
#    the executor disagrees;
#  - the first FSDP (FullyShardedDataParallel, flat parameters) is refused with exit 2, by name.
# What makes FSDP2 capturable: its flat all-gather and reduce-scatter buffers are read as the
# values they hold (tools/torchcap/memory.py segments, collectives.py per-piece collectives).
. "$(dirname "$0")/lib.sh"
set -e
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
T2P="/usr/bin/python3 $ROOT/tools/torch2plan"
EX=$ROOT/examples/torch
cap() {
  n=$1
  shift
  expect_exit 0 $T2P --single "$EX/gpt2_single.py" --parallel "$EX/gpt2_fsdp.py" --nproc "$n" --set dp="$n" \
    --out-single "$TMP/s.plan" --out-parallel "$TMP/p.plan" "$@"
}
for conf in "2" "2 --set opt=sgdm" "2 --set opt=adamw --set clip=0.5" "4"; do
  cap $conf
  expect_exit 0 "$VERDICT" -q --sm "$TMP/s.plan" --pm "$TMP/p.plan"
  expect_in "^EQUIVALENT" "$TMP/out"
  expect_exit 0 "$VERDICT" exec --sm "$TMP/s.plan" --pm "$TMP/p.plan"
  expect_in "AGREE" "$TMP/out"
done
cap 2 --set bug=sum_rs
expect_exit 1 "$VERDICT" --sm "$TMP/s.plan" --pm "$TMP/p.plan"
expect_in "^NOT EQUIVALENT" "$TMP/out"
expect_in "input 1 is 2 x its single-device value" "$TMP/out"
expect_in "the factor comes from rank 0 scale 'gpt2.py:92'" "$TMP/out"
expect_exit 1 "$VERDICT" exec --sm "$TMP/s.plan" --pm "$TMP/p.plan"
expect_in "DISAGREE" "$TMP/out"
# the first FSDP (flat parameters): refused by name, pointing at fully_shard
expect_exit 2 $T2P --single "$EX/gpt2_single.py" --parallel "$EX/gpt2_fsdp1.py" --nproc 2 --set dp=2 \
  --out-single "$TMP/s.plan" --out-parallel "$TMP/p.plan"
expect_in "FullyShardedDataParallel (the first FSDP) is not supported.*fully_shard" "$TMP/err"
echo ok
