"""examples/torch/mlp_ddp.py - mlp_single.py's classifier trained with DistributedDataParallel
(gradient_as_bucket_view=True): each rank takes its slice of the batch, DDP averages the
gradients, clipping and AdamW run on every rank.  --set act=... and loss=... as in mlp_single.py.
Bug (--set bug=nosync): the whole step runs under ddp.no_sync(), so no gradient is reduced.
"""
import contextlib
import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mlp_single import criterion, data, make  # noqa: E402
from torchcap import Shard  # noqa: E402

torch.set_default_dtype(torch.float64)


def step(cap):
    cap.mesh(dp=dist.get_world_size())
    model = make(cap)
    x, y = data()
    r, w = dist.get_rank(), dist.get_world_size()
    x, y = x.chunk(w)[r].clone(), y.chunk(w)[r].clone()
    cap.params(model)
    cap.input(x, "x", dp=Shard(0))
    cap.input(y, "y", dp=Shard(0))
    ddp = DDP(model, gradient_as_bucket_view=True)
    opt = torch.optim.AdamW(ddp.parameters(), lr=1e-2, weight_decay=0.1)
    cap.optimizer(opt)
    crit = criterion(cap)
    sync = ddp.no_sync() if cap.args.get("bug") == "nosync" else contextlib.nullcontext()
    with cap.step():
        with sync:
            loss = crit(ddp(x), y)
            loss.backward()
        torch.nn.utils.clip_grad_norm_(ddp.parameters(), 1.0)
        opt.step()
        dist.all_reduce(loss, op=dist.ReduceOp.AVG)
    cap.loss(loss, "loss")
