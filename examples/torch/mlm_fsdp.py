"""examples/torch/mlm_fsdp.py - mlm.py fully sharded with FSDP2: fully_shard on every block, then
on the root (embeddings, final norm, head); each rank trains on its slice of the batch.
--set bug=no_div: FSDP's reduce-scatter sums (gradient divide factor 1) although each rank's
loss is a mean over its own slice; --set bug=no_root: the root is never wrapped (the
embeddings', final norm's and head's gradients stay each rank's own).
"""
import os
import sys

import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mlm  # noqa: E402
from torchcap import Shard  # noqa: E402


def step(cap):
    cap.mesh(dp=cap.world)
    mesh = init_device_mesh("cpu", (cap.world,))
    model = mlm.build()
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    if cap.args.get("bug") != "no_root":   # BUG: without it, the root's parameters are not reduced
        fully_shard(model, mesh=mesh)
    if cap.args.get("bug") == "no_div":
        model.set_gradient_divide_factor(1.0)   # BUG: a sum of the ranks' mean gradients
    idx, tgt = (t.chunk(cap.world)[dist.get_rank()].clone() for t in mlm.batch())
    cap.params(model)
    cap.input(idx, "idx", dp=Shard(0))
    cap.input(tgt, "tgt", dp=Shard(0))
    opt = mlm.optimizer(model)
    cap.optimizer(opt)
    with cap.step():
        loss = model(idx, tgt)
        loss.backward()
        opt.step()
        dist.all_reduce(loss.detach(), op=dist.ReduceOp.AVG)
    cap.loss(loss, "loss")
