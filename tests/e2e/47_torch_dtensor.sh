# DTensor tensor and sequence parallelism as users write it (examples/torch/gpt2_dtensor.py:
# init_device_mesh, parallelize_module with ColwiseParallel / RowwiseParallel /
# SequenceParallel; the model code of gpt2.py unchanged) against gpt2_single.py:
#  - TP2, TP2 with SequenceParallel, and 2-D dp2 x tp2 are EQUIVALENT and the executor agrees;
#    the parameters' placements come from DTensor (cap.params), not from declarations;
#  - a row-parallel layer whose partial sums are never reduced (output_layouts=Partial(),
#    the local output used as is) is NOT EQUIVALENT and the executor disagrees;
#  - the MLP's proj given ColwiseParallel where RowwiseParallel belongs fails inside DTensor:
#    refused with exit 2 naming the user's line.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/torch_lib.sh"
set -e
cap() { capture_pair gpt2_single.py gpt2_dtensor.py "$@"; }
for conf in "2 --set tp=2" "2 --set tp=2 --set sp=1" "4 --set tp=2"; do
  cap $conf
  pair_equivalent
done
cap 2 --set tp=2 --set bug=no_reduce
pair_not_equivalent
WANT=2 cap 2 --set tp=2 --set bug=row_as_col
expect_in "gpt2.py:[0-9]*: DTensor refused the operator" "$TMP/err"
echo ok
