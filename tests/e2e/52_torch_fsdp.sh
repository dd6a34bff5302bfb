# FSDP2 as users write it (examples/torch/gpt2_fsdp.py: fully_shard on every block and on the
# root, the model code of gpt2.py unchanged) against gpt2_single.py, on gloo:
#  - SGD, SGD with momentum, AdamW with clip_grad_norm_ over the DTensor gradients, and SGD on
#    dp4 (FSDP then divides before and after the reduce-scatter by 2 each): EQUIVALENT
#    and the executor agrees; the shard layout comes from FSDP's DTensor parameters (cap.params)
#    and the optimizer state is DTensors too; with activation checkpointing on the blocks
#    (--set ckpt=1: torch.utils.checkpoint, the forward recomputed inside the backward) too;
#  - the reduce-scatter summing where the loss is a mean (the gradient divide factor set to 1):
#    NOT EQUIVALENT, one finding: SCALE (factor 2) at FSDP's reduce-scatter, on the step's
#    backward line (the optimizer's input, proven 2 x its single-device value, read as that
#    value makes the update right: solver/stage_solve.c unscaled_check), and the executor
#    disagrees;
#  - under make e2e-full: MixedPrecisionPolicy (bfloat16 compute, float32 reduction; float32
#    compute) and CPUOffloadPolicy(pin_memory=False): EQUIVALENT over the
#    reals, the executor agrees (its casts are identities); FSDP casts each flattened shard into
#    the all-gather buffer, recorded as the reshape of the cast shard (aten_map.py _cast), so the
#    gathered buffer reads as the parameter's shards; CPUOffloadPolicy's default pin_memory=True
#    needs CUDA: exit 2, by name.
# The first FSDP (FullyShardedDataParallel, flat parameters): tests/e2e/53_torch_fsdp1.sh.
# What makes FSDP2 capturable: its flat all-gather and reduce-scatter buffers are read as the
# values they hold (tools/torchcap/memory.py segments, collectives.py per-piece collectives).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/torch_lib.sh"
set -e
dp_configs_equivalent gpt2_single.py gpt2_fsdp.py "2" "2 --set opt=sgdm" "2 --set opt=adamw --set clip=0.5" "4" \
  "2 --set ckpt=1"
if full_rows; then
  dp_configs_equivalent gpt2_single.py gpt2_fsdp.py "2 --set mp=bf16 --set rd=f32" "2 --set mp=f32" "2 --set offload=1"
fi
WANT=2 capture_pair gpt2_single.py gpt2_fsdp.py 2 --set dp=2 --set offload=1 --set pin=1
expect_in "gpt2_fsdp.py:[0-9]*: the program pins host memory .*CPUOffloadPolicy(pin_memory=False)" "$TMP/err"
capture_pair gpt2_single.py gpt2_fsdp.py 2 --set dp=2 --set bug=sum_rs
BWD=$(grep -n 'loss.backward()' "$EX/gpt2_fsdp.py" | tail -1 | cut -d: -f1)
pair_not_equivalent --full "input 1 is 2 x its single-device value" "the factor comes from rank 0 scale 'gpt2.py:92'" \
  "^  findings: 1 " "^   1\. .*SCALE at reduce_scatter 'gpt2_fsdp.py:$BWD'.*c10d._reduce_scatter_base_" \
  "diagnosis SCALE (factor 2)"
# with momentum the failing stages are the updates alone: each reads a gradient proven 2 x its
# single-device value, and reads right as that value
capture_pair gpt2_single.py gpt2_fsdp.py 2 --set dp=2 --set opt=sgdm --set bug=sum_rs
pair_not_equivalent "^  findings: 1 " "^   1\. .*SCALE at reduce_scatter 'gpt2_fsdp.py:$BWD'" \
  "which is 2 x its single-device value (an inferred lineage, proven) as rank 0 reduce_scatter"
echo ok
