# HSDP with FSDP2 (examples/torch/gpt2_fsdp.py --set hsdp=2, 4 ranks): fully_shard on a 2-D
# mesh of 2 replicas, each sharding the parameters 2 ways.  FSDP reduce-scatters a gradient in
# the shard group (the sum of that group's batch parts) and all-reduces the result across the
# replicas; lineage inference reads the first as parts [2d, 2d + 2) of the 4 batch parts and
# the second as their whole (lineage/infer_kinds.c sum_of_parts).  The correct program is
# EQUIVALENT and the executor agrees; a gradient divide factor of 1 (bug=sum_rs: one finding,
# SCALE with factor 4 at the all-reduce across the replicas, where a stage holds once that sum
# is divided by 4) and the replicas' all-reduce left off (bug=no_rep_reduce: the parameters get
# no gradient and are never updated) are NOT EQUIVALENT and the executor disagrees.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/torch_lib.sh"
set -e
HSDP="--set dp=4 --set hsdp=2"

capture_pair gpt2_single.py gpt2_fsdp.py 4 $HSDP
pair_equivalent "4 ranks"

capture_pair gpt2_single.py gpt2_fsdp.py 4 $HSDP --set bug=sum_rs
BWD=$(grep -n 'loss.backward()' "$EX/gpt2_fsdp.py" | tail -1 | cut -d: -f1)
pair_not_equivalent "^  findings: 1 " "^   1\. .*SCALE at all_reduce 'gpt2_fsdp.py:$BWD'" "diagnosis SCALE (factor 4)"

capture_pair gpt2_single.py gpt2_fsdp.py 4 $HSDP --set bug=no_rep_reduce
pair_not_equivalent "DATAFLOW" "single weight 'wte.weight' (final value) has no lineage"
echo "ok 52_torch_hsdp"
