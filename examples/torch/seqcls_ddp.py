"""examples/torch/seqcls_ddp.py - seqcls.py under DistributedDataParallel: each rank takes its
share of the batch and accumulates 2 microbatches, the first under no_sync().
--set bug=sync_first: the first microbatch's backward syncs and the last runs under no_sync()
(DDP then reduces only the first microbatch's gradients; the last one's stay each rank's own).
--set bug=head_noavg: the classifier head (over the pooled and last-token features) is left out
of DDP's reducer, so its gradients are never averaged (each rank steps on its own share's).
"""
import contextlib
import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import seqcls  # noqa: E402
from torchcap import Shard  # noqa: E402


def step(cap):
    cap.mesh(dp=cap.world)
    rank, world = dist.get_rank(), dist.get_world_size()
    model = seqcls.build()
    ids, y = (t.chunk(world)[rank].clone() for t in seqcls.data())
    cap.params(model)
    cap.input(ids, "ids", dp=Shard(0))
    cap.input(y, "y", dp=Shard(0))
    if cap.args.get("bug") == "head_noavg":   # BUG: the head's gradients are never averaged
        DDP._set_params_and_buffers_to_ignore_for_model(model, ["head.weight", "head.bias"])
    ddp = DDP(model)
    opt = torch.optim.Adam(ddp.parameters(), lr=1e-3)
    cap.optimizer(opt)
    accum = int(cap.args.get("ddp_accum", seqcls.ACCUM))
    with cap.step():
        total = 0.0
        for i, (xb, yb) in enumerate(zip(ids.chunk(accum), y.chunk(accum))):
            last = 0 if cap.args.get("bug") == "sync_first" else accum - 1   # BUG: syncs the first
            ctx = contextlib.nullcontext() if i == last else ddp.no_sync()
            with ctx:
                loss = ddp(xb, yb) / accum
                loss.backward()
            total = total + loss.detach()
        opt.step()
        opt.zero_grad()
        dist.all_reduce(total, op=dist.ReduceOp.AVG)
    cap.loss(total, "loss")
