# Optimizers, clipping, ZeRO and DDP comm hooks on the GPT-2 of examples/torch/gpt2.py
# (tools/torchcap/optim.py, buckets.py):
#  - SGD with momentum and weight decay, clip_grad_norm_: the single capture is faithful (replay);
#  - DDP dp2 with SGD momentum + clipping, the stock allreduce_hook, fp16_compress_hook and a
#    user hook: EQUIVALENT, exec AGREE; ZeroRedundancyOptimizer (AdamW, SGD momentum + clip) too;
#  - bugs: a user hook that does not divide, a ZeRO partition never broadcast, a clip norm over
#    the rank's own partition only: NOT EQUIVALENT with the line, exec DISAGREE.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/torch_lib.sh"
set -e
replay_faithful gpt2_single.py 3 --set opt=sgdm --set clip=0.5
cap() {
  prog=$1; shift
  capture_pair gpt2_single.py "$prog" 2 --set dp=2 "$@"
}
for conf in "gpt2_ddp.py --set opt=sgdm --set clip=0.5" "gpt2_ddp.py --set hook=allreduce" \
            "gpt2_ddp.py --set hook=fp16" "gpt2_ddp.py --set hook=user --set opt=adamw" \
            "gpt2_zero.py --set opt=adamw" "gpt2_zero.py --set opt=sgdm --set clip=0.5"; do
  cap $conf
  pair_equivalent
done
bug() {
  line=$1; shift
  cap "$@"
  pair_not_equivalent "$line"
}
bug "scale 'gpt2.py:92'" gpt2_ddp.py --set hook=user --set bug=hook_nodiv
bug "stopped first at rank 1 mb 0 add 'gpt2_zero.py:51'" gpt2_zero.py --set clip=0.1 --set bug=local_norm
bug "NOT EQUIVALENT" gpt2_zero.py --set bug=stale
echo ok
