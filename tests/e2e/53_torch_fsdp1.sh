# The first FSDP as users write it (examples/torch/gpt2_fsdp1.py: FullyShardedDataParallel with
# every block its own unit, use_orig_params=True) against gpt2_single.py, on gloo:
#  - SGD at dp2 (FULL_SHARD and SHARD_GRAD_OP, units by auto_wrap_policy or by hand) and dp4, AdamW with FSDP's own clip_grad_norm_
#    (in float32: FSDP1 refuses to take float64 norms), NO_SHARD: EQUIVALENT and the executor
#    agrees; a rank's flat shard is declared as the boxes of the parameters it holds
#    (cap.declare_range), its all-gather recorded as broadcasts per piece, the flat gradient's
#    reduce-scatter as all-reduces per box (tools/torchcap/fsdp.py, collectives.py);
#  - the reduce-scatter summing where the loss is a mean (the gradient divide factors set to 1):
#    NOT EQUIVALENT, one finding: SCALE (factor 2) at the flat gradient's reduce-scatter (its
#    per-box all-reduces), on the step's backward line (a stage holds once that sum is divided
#    by 2, or once the optimizer's input, proven 2 x its single-device value, is read as that
#    value: solver/stage_solve.c reducer_check, unscaled_check), and the executor disagrees;
#  - the blocks wrapped by hand and the root forgotten (the embeddings' gradients never reduced):
#    NOT EQUIVALENT, one finding: MISSING_REDUCTION at the optimizer's update (the two ranks'
#    updates average to the single-device one: each used its own share of the mean gradient),
#    inference naming the missing reduction;
#  - (make e2e-full) gradient accumulation over 2 microbatches, the first under no_sync() (FSDP1's post-backward
#    hook then reads the whole flat parameter, a concatenation rebuilt from its pieces, whose views
#    are taken piece by piece: capture.py Cell.rebuilt, aten_map.py _lazy_view): EQUIVALENT;
#  - use_orig_params=False is refused with exit 2, by name.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/torch_lib.sh"
set -e
dp_configs_equivalent gpt2_single.py gpt2_fsdp1.py "2" "2 --set strategy=shard_grad_op" \
  "2 --set opt=adamw --set clip=0.5 --set dtype=f32" "2 --set strategy=no_shard" "2 --set wrap=manual" "4"
if full_rows; then dp_configs_equivalent gpt2_single.py gpt2_fsdp1.py "2 --set accum=2"; fi
capture_pair gpt2_single.py gpt2_fsdp1.py 2 --set dp=2 --set bug=flat_sum
line() { grep -n "$1" "$EX/gpt2_fsdp1.py" | tail -1 | cut -d: -f1; }
pair_not_equivalent --full "^  findings: 1 " \
  "^   1\. .*SCALE at all_reduce 'gpt2_fsdp1.py:$(line 'loss.backward()')'.*c10d._reduce_scatter_base_" \
  "diagnosis SCALE (factor 2)" "with its sum divided by 2, the stage holds"
capture_pair gpt2_single.py gpt2_fsdp1.py 2 --set dp=2 --set bug=no_root
pair_not_equivalent "^  findings: 1 " "^   1\. .*MISSING_REDUCTION at add 'gpt2_fsdp1.py:$(line 'opt.step()')'" \
  "stopped first at .*one copy's share of a mean .*a missing reduction" "the 2 copies average to it"
WANT=2 capture_pair gpt2_single.py gpt2_fsdp1.py 2 --set dp=2 --set orig=0
expect_in "FullyShardedDataParallel with use_orig_params=False .*is not supported; pass use_orig_params=True" "$TMP/err"
echo ok
