# A model written as one writes it today (tests/torch/rms_single.py: nn.RMSNorm, SiLU MLP,
# nn.Dropout(0.0), AdamW with betas, a LambdaLR scheduler, zero_grad(set_to_none=True) inside the
# step, clip_grad_norm_), none of it shaped for verdict:
#  - under DDP (rms_ddp.py, the logged loss averaged by hand): EQUIVALENT, the executor agrees;
#  - with DTensor TP (rms_tp.py: ColwiseParallel / RowwiseParallel on the MLPs, replicated
#    logits), no clipping on either side: EQUIVALENT, the executor agrees;
#  - with clipping, DTensor itself refuses the TP program (a mix of DTensor and plain
#    parameters): exit 2, naming DTensor's refusal and the line;
#  - DTensor's loss_parallel() is refused with exit 2, naming loss_parallel (not only the aten
#    operator it runs) and what to write instead.
. "$(dirname "$0")/lib.sh"
set -e
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
T2P="/usr/bin/python3 $ROOT/tools/torch2plan"   # it runs the captures in the project's .venv
D=$ROOT/tests/torch
cap() { $T2P --single "$D/rms_single.py" --out-single "$TMP/s.plan" --out-parallel "$TMP/p.plan" --nproc 2 "$@"; }
# agree RC VERDICT-LINE EXEC-WORD: the verifier and the executor exit RC, with that line and word
agree() {
  expect_exit "$1" "$VERDICT" -q --sm "$TMP/s.plan" --pm "$TMP/p.plan"
  expect_in "$2" "$TMP/out"
  expect_exit "$1" "$VERDICT" exec --sm "$TMP/s.plan" --pm "$TMP/p.plan"
  expect_in "^exec: $3 " "$TMP/out"
}
expect_exit 0 cap --parallel "$D/rms_ddp.py"
agree 0 "^EQUIVALENT" "AGREE"
expect_exit 0 cap --parallel "$D/rms_tp.py" --set clip=0
agree 0 "^EQUIVALENT" "AGREE"
# clipping over a mix of DTensor and plain parameters fails inside DTensor itself: exit 2, named
expect_exit 2 cap --parallel "$D/rms_tp.py" --set clip=1
expect_in "rms_single.py:[0-9]*: DTensor refused the operator (aten._foreach_norm" "$TMP/err"
expect_exit 2 cap --parallel "$D/rms_tp.py" --set clip=0 --set lp=1
expect_in "rms_single.py:[0-9]*: DTensor's loss_parallel() is not supported (it runs aten\.[a-z_.A-Z]*, " "$TMP/err"
expect_in "ColwiseParallel(output_layouts=Replicate())" "$TMP/err"
echo ok
