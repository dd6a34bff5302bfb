# A classifier as one writes it (examples/torch/mlp_single.py, mlp_ddp.py): nn.Sequential with
# ReLU / Tanh / Sigmoid / GELU / SiLU, CrossEntropyLoss, AdamW, clip_grad_norm_, under DDP:
#  - the single capture is faithful for every activation (replay AGREE: relu, threshold_backward,
#    tanh_backward and sigmoid_backward are mapped with torch's semantics);
#  - DDP dp2: EQUIVALENT and exec AGREE; the step under no_sync(): NOT EQUIVALENT,
#    MISSING_REDUCTION, exec DISAGREE.
. "$(dirname "$0")/lib.sh"
set -e
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
T2P="/usr/bin/python3 $ROOT/tools/torch2plan"
EX=$ROOT/examples/torch
for act in relu,tanh sigmoid,gelu; do
  expect_exit 0 $T2P --single "$EX/mlp_single.py" --out-single "$TMP/s1.plan" --set act=$act
  expect_exit 0 "$VERDICT" exec --sm "$TMP/s1.plan" --dump "$TMP/v" --seed 5
  expect_exit 0 $T2P --single "$EX/mlp_single.py" --replay "$TMP/v" --set act=$act --tol 1e-12
  expect_in "replay AGREE" "$TMP/out"
  expect_exit 0 $T2P --single "$EX/mlp_single.py" --parallel "$EX/mlp_ddp.py" --nproc 2 \
    --out-single "$TMP/s.plan" --out-parallel "$TMP/p.plan" --set act=$act
  expect_exit 0 "$VERDICT" -q --sm "$TMP/s.plan" --pm "$TMP/p.plan"
  expect_in "^EQUIVALENT" "$TMP/out"
  expect_exit 0 "$VERDICT" exec --sm "$TMP/s.plan" --pm "$TMP/p.plan"
  expect_in "AGREE" "$TMP/out"
done
expect_exit 0 $T2P --single "$EX/mlp_single.py" --parallel "$EX/mlp_ddp.py" --nproc 2 \
  --out-single "$TMP/s.plan" --out-parallel "$TMP/p.plan" --set bug=nosync
expect_exit 1 "$VERDICT" --sm "$TMP/s.plan" --pm "$TMP/p.plan"
expect_in "^NOT EQUIVALENT" "$TMP/out"
expect_in "MISSING_REDUCTION" "$TMP/out"
expect_exit 1 "$VERDICT" exec --sm "$TMP/s.plan" --pm "$TMP/p.plan"
expect_in "DISAGREE" "$TMP/out"
echo ok
