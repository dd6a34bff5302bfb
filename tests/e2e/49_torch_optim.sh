# Optimizers, clipping, ZeRO and DDP comm hooks on the GPT-2 of examples/torch/gpt2.py
# (tools/torchcap/optim.py, buckets.py):
#  - SGD with momentum and weight decay, clip_grad_norm_: the single capture is faithful (replay);
#  - DDP dp2 with SGD momentum + clipping, the stock allreduce_hook, fp16_compress_hook and a
#    user hook: EQUIVALENT, exec AGREE; ZeroRedundancyOptimizer (AdamW, SGD momentum + clip) too;
#  - bugs: a user hook that does not divide, a ZeRO partition never broadcast, a clip norm over
#    the rank's own partition only: NOT EQUIVALENT with the line, exec DISAGREE.
. "$(dirname "$0")/lib.sh"
set -e
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
T2P="/usr/bin/python3 $ROOT/tools/torch2plan"
EX=$ROOT/examples/torch
expect_exit 0 $T2P --single "$EX/gpt2_single.py" --out-single "$TMP/s1.plan" --set opt=sgdm --set clip=0.5
expect_exit 0 "$VERDICT" exec --sm "$TMP/s1.plan" --dump "$TMP/v" --seed 3
expect_exit 0 $T2P --single "$EX/gpt2_single.py" --replay "$TMP/v" --set opt=sgdm --set clip=0.5 --tol 1e-12
expect_in "replay AGREE" "$TMP/out"
cap() {
  prog=$1; shift
  expect_exit 0 $T2P --single "$EX/gpt2_single.py" --parallel "$EX/$prog" --nproc 2 --set dp=2 \
    --out-single "$TMP/s.plan" --out-parallel "$TMP/p.plan" "$@"
}
for conf in "gpt2_ddp.py --set opt=sgdm --set clip=0.5" "gpt2_ddp.py --set hook=allreduce" \
            "gpt2_ddp.py --set hook=fp16" "gpt2_ddp.py --set hook=user --set opt=adamw" \
            "gpt2_zero.py --set opt=adamw" "gpt2_zero.py --set opt=sgdm --set clip=0.5"; do
  cap $conf
  expect_exit 0 "$VERDICT" -q --sm "$TMP/s.plan" --pm "$TMP/p.plan"
  expect_in "^EQUIVALENT" "$TMP/out"
  expect_exit 0 "$VERDICT" exec --sm "$TMP/s.plan" --pm "$TMP/p.plan"
  expect_in "AGREE" "$TMP/out"
done
bug() {
  line=$1; shift
  cap "$@"
  expect_exit 1 "$VERDICT" -q --sm "$TMP/s.plan" --pm "$TMP/p.plan"
  expect_in "^NOT EQUIVALENT" "$TMP/out"
  expect_in "$line" "$TMP/out"
  expect_exit 1 "$VERDICT" exec --sm "$TMP/s.plan" --pm "$TMP/p.plan"
  expect_in "DISAGREE" "$TMP/out"
}
bug "scale 'gpt2.py:92'" gpt2_ddp.py --set hook=user --set bug=hook_nodiv
bug "stopped first at rank 1 mb 0 add 'gpt2_zero.py:51'" gpt2_zero.py --set clip=0.1 --set bug=local_norm
bug "NOT EQUIVALENT" gpt2_zero.py --set bug=stale
echo ok
