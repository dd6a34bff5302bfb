"""examples/torch/tinyllama_tp.py - tinyllama.py tensor-parallel with DTensor, the torchtitan way:
parallelize_module on each block with ColwiseParallel for wq/wk/wv/w1/w3 and RowwiseParallel for
wo/w2; embeddings, norms and the head stay replicated.  Attention views the heads with -1, so
each rank runs its own heads unchanged.
--set bug=partial_w2: w2's output stays Partial (each rank's partial sums used as the sum: the
row-parallel all-reduce is missing).
"""
import os
import sys

from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Partial
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tinyllama  # noqa: E402


def step(cap):
    cap.mesh(tp=cap.world)
    mesh = init_device_mesh("cpu", (cap.world,), mesh_dim_names=("tp",))
    model = tinyllama.build(cap.args)
    w2 = RowwiseParallel()
    if cap.args.get("bug") == "partial_w2":   # BUG: the row-parallel output is never all-reduced
        w2 = RowwiseParallel(output_layouts=Partial(), use_local_output=True)
    for block in model.layers:
        parallelize_module(block, mesh, {
            "attention.wq": ColwiseParallel(), "attention.wk": ColwiseParallel(),
            "attention.wv": ColwiseParallel(), "attention.wo": RowwiseParallel(),
            "feed_forward.w1": ColwiseParallel(), "feed_forward.w3": ColwiseParallel(),
            "feed_forward.w2": w2,
        })
    tokens, labels = tinyllama.data()
    cap.params(model)
    cap.input(tokens, "tokens")
    cap.input(labels, "labels")
    opt = tinyllama.optimizer(model.parameters())
    cap.optimizer(opt)
    with cap.step():
        loss = model(tokens, labels)
        loss.backward()   # (no clip_grad_norm_: torch's refuses a mix of DTensor and plain gradients)
        opt.step()
        opt.zero_grad(set_to_none=True)
    cap.loss(loss, "loss")
