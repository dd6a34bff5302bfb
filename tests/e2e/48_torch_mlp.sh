# A classifier as one writes it (examples/torch/mlp_single.py, mlp_ddp.py): nn.Sequential with
# ReLU / Tanh / Sigmoid / GELU / SiLU, CrossEntropyLoss, AdamW, clip_grad_norm_, under DDP:
#  - the single capture is faithful for every activation (replay AGREE: relu, threshold_backward,
#    tanh_backward and sigmoid_backward are mapped with torch's semantics);
#  - the cross-entropy written out with log_softmax and gather (--set loss=gather: aten.gather,
#    new_zeros and scatter_add as a checked pick and its backward) is faithful and EQUIVALENT;
#  - DDP dp2: EQUIVALENT and exec AGREE; the step under no_sync(): NOT EQUIVALENT,
#    MISSING_REDUCTION, exec DISAGREE.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/torch_lib.sh"
set -e
for act in relu,tanh sigmoid,gelu; do
  replay_faithful mlp_single.py 5 --set act=$act
  capture_pair mlp_single.py mlp_ddp.py 2 --set act=$act
  pair_equivalent
done
replay_faithful mlp_single.py 5 --set loss=gather
capture_pair mlp_single.py mlp_ddp.py 2 --set loss=gather
pair_equivalent
capture_pair mlp_single.py mlp_ddp.py 2 --set bug=nosync
pair_not_equivalent --full "MISSING_REDUCTION"
echo ok
