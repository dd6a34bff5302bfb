# DTensor tensor and sequence parallelism as users write it (examples/torch/gpt2_dtensor.py:
# init_device_mesh, parallelize_module with ColwiseParallel / RowwiseParallel /
# SequenceParallel; the model code of gpt2.py unchanged) against gpt2_single.py:
#  - TP2, TP2 with SequenceParallel, and 2-D dp2 x tp2 are EQUIVALENT and the executor agrees;
#    the parameters' placements come from DTensor (cap.params), not from declarations; so is
#    (make e2e-full) FSDP2 over dp on top of TP (--set fsdp=1, torchtitan's 2-D layout: a parameter sharded
#    over both mesh dims, _StridedShard on dp, declared as the box each rank holds);
#  - a row-parallel layer whose partial sums are never reduced (output_layouts=Partial(),
#    the local output used as is) is NOT EQUIVALENT and the executor disagrees;
#  - the MLP's proj given ColwiseParallel where RowwiseParallel belongs fails inside DTensor:
#    refused with exit 2 naming the user's line;
#  - sp=1 keeps the residual stream local tensors (the styles' defaults) and sp=dtensor keeps it
#    DTensors: both EQUIVALENT, the executor agrees;
#  - bug=placement (sp=1): the last block's PrepareModuleOutput states the sequence-sharded
#    local output as Shard(0) where Shard(1) is right; DTensor trusts it and gathers along the
#    batch (the shapes still fit): NOT EQUIVALENT, PERMUTED_SLICES at that all_gather, whose
#    call stack ends at the program line that applied PrepareModuleOutput(output_layouts=Shard(0)),
#    and the executor disagrees;
#  - clip=0.5 (AdamW): clip_grad_norm_ over DTensor gradients only (the plain parameters made
#    Replicate DTensors: torch refuses a mixed list), recorded in the plan (clip_coef), EQUIVALENT.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/torch_lib.sh"
set -e
cap() { capture_pair gpt2_single.py gpt2_dtensor.py "$@"; }
for conf in "2 --set tp=2" "2 --set tp=2 --set sp=1" "2 --set tp=2 --set sp=dtensor" "4 --set tp=2"; do
  cap $conf
  pair_equivalent
done
if full_rows; then cap 4 --set tp=2 --set fsdp=1; pair_equivalent; fi
cap 2 --set tp=2 --set opt=adamw --set clip=0.5
pair_equivalent
grep -q clip_coef "$TMP/p.plan" || { echo "FAIL: the parallel plan of clip=0.5 does not clip" >&2; exit 1; }
cap 2 --set tp=2 --set bug=no_reduce
pair_not_equivalent
# the line that applies the wrong PrepareModuleOutput, and the model's call of the last block
APPLY=$(grep -n "parallelize_module(block, tp_mesh, PrepareModuleOutput(" "$EX/gpt2_dtensor.py" | cut -d: -f1)
BLOCK=$(grep -n "else block(x)" "$EX/gpt2.py" | cut -d: -f1)
cap 2 --set tp=2 --set sp=1 --set bug=placement
pair_not_equivalent --full "^   1\. .*PERMUTED_SLICES at all_gather 'gpt2.py:$BLOCK'" \
  "stack: examples/torch/gpt2.py:$BLOCK in forward < [^ ]*gpt2_dtensor.py:[0-9]* in step < [^ ]*gpt2_dtensor.py:$APPLY in step: applies PrepareModuleOutput(output_layouts=(Shard(dim=0),)" \
  "holds the numbers of the single-device value of 'gpt2.py:[0-9]*' \[4, 8, 16\] in another arrangement"
WANT=2 cap 2 --set tp=2 --set bug=row_as_col
expect_in "gpt2.py:[0-9]*: DTensor refused the operator" "$TMP/err"
echo ok
