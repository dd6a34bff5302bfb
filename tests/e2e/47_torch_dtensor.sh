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
set -e
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
T2P="/usr/bin/python3 $ROOT/tools/torch2plan"
EX=$ROOT/examples/torch
cap() {
  n=$1
  shift
  expect_exit 0 $T2P --single "$EX/gpt2_single.py" --parallel "$EX/gpt2_dtensor.py" --nproc "$n" \
    --out-single "$TMP/s.plan" --out-parallel "$TMP/p.plan" "$@"
}
for conf in "2 --set tp=2" "2 --set tp=2 --set sp=1" "4 --set tp=2"; do
  cap $conf
  expect_exit 0 "$VERDICT" -q --sm "$TMP/s.plan" --pm "$TMP/p.plan"
  expect_in "^EQUIVALENT" "$TMP/out"
  expect_exit 0 "$VERDICT" exec --sm "$TMP/s.plan" --pm "$TMP/p.plan"
  expect_in "AGREE" "$TMP/out"
done
cap 2 --set tp=2 --set bug=no_reduce
expect_exit 1 "$VERDICT" -q --sm "$TMP/s.plan" --pm "$TMP/p.plan"
expect_in "^NOT EQUIVALENT" "$TMP/out"
expect_exit 1 "$VERDICT" exec --sm "$TMP/s.plan" --pm "$TMP/p.plan"
expect_in "DISAGREE" "$TMP/out"
expect_exit 2 $T2P --single "$EX/gpt2_single.py" --parallel "$EX/gpt2_dtensor.py" --nproc 2 --set tp=2 \
  --set bug=row_as_col --out-single "$TMP/s.plan" --out-parallel "$TMP/p.plan"
expect_in "gpt2.py:[0-9]*: DTensor refused the operator" "$TMP/err"
echo ok
