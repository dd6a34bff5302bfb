# Megatron-Core's own tensor-parallel layers (examples/torch/gpt2_mcore.py: ColumnParallelLinear
# for q/k/v and the MLP's fc, RowParallelLinear for the out projections, the bias added after
# Megatron's matmul, a row-parallel one after the all-reduce) against the GPT-2 reference written
# with nn.Linear (bias fused into addmm):
#  - the split weights' placements come from Megatron-Core's own parameter marks (nothing is
#    declared by hand), and the pair is EQUIVALENT in one round with no stage left inconclusive;
#    the executor agrees;
#  - a row-parallel layer whose bias is dropped (skip_bias_add, the returned bias ignored) is
#    NOT EQUIVALENT, and the executor disagrees.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/torch_lib.sh"
set -e
cap() { capture_pair gpt2_single.py gpt2_mcore.py 2 --set tp=2 "$@"; }
cap
pair_equivalent "0 dropped after a failed proof, 1 round"
# the weights' tp placements were read from Megatron-Core's marks: a column-parallel weight is
# half of the single-device rows on each rank (its lineage slice), a row-parallel bias is whole
"$VERDICT" plan dump "$TMP/p.plan" > "$TMP/dump"
for slice in "fc.weight .*\[0:32,0:16\]" "fc.weight .*\[32:64,0:16\]" "proj.weight .*\[0:16,0:32\]" \
    "proj.weight .*\[0:16,32:64\]" "out_proj.bias .*\[0:16\]$"; do
  grep -q "h\.0\.mlp\.$slice\|h\.0\.attn\.$slice" "$TMP/dump" || fail "no weight with the lineage $slice"
done
cap --set bug=no_bias_rowwise
pair_not_equivalent
echo ok
