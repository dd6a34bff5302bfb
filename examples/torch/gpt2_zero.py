"""examples/torch/gpt2_zero.py - the GPT-2 of gpt2.py trained data-parallel with
DistributedDataParallel and torch.distributed.optim.ZeroRedundancyOptimizer: each rank keeps the
optimizer state of its own partition of the parameters, steps that partition, and broadcasts the
updated parameters to the other ranks.  The parallel program of gpt2_single.py
(tools/torch2plan --nproc DP --set dp=DP; --set opt=sgdm|adam|adamw, clip=X).
Bug (--set bug=stale): the last rank's partition is never broadcast, so the other ranks keep
their stale copies of those parameters (BUGS.md #24).  --set clip=X --set bug=local_norm clips
with the norm of the rank's own partition of the gradients, not of all of them (BUGS.md #23).
"""
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt2  # noqa: E402
from torchcap import Shard  # noqa: E402

OPTIMIZERS = {"sgd": (torch.optim.SGD, dict(lr=gpt2.LR)),
              "sgdm": (torch.optim.SGD, dict(lr=gpt2.LR, momentum=0.9, weight_decay=0.01)),
              "adam": (torch.optim.Adam, dict(lr=gpt2.LR, betas=(0.9, 0.95), eps=1e-8)),
              "adamw": (torch.optim.AdamW, dict(lr=gpt2.LR, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1))}


def step(cap):
    c = gpt2.config(cap.args)
    dp = int(c["dp"]) if int(c["dp"]) > 1 else cap.world
    cap.mesh(dp=dp)
    model = gpt2.build(c)
    idx, targets = gpt2.batch()
    mine = [t.chunk(dp)[cap.rank].clone() for t in (idx, targets)]
    cap.params(model)
    cap.input(mine[0], "idx", dp=Shard(0))
    cap.input(mine[1], "targets", dp=Shard(0))
    ddp = DDP(model)
    cls, kw = OPTIMIZERS[c["opt"]]
    opt = ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=cls, **kw)
    if c["bug"] == "stale":   # BUG: the last rank's partition is never broadcast
        sync = opt._broadcast_params_from_rank
        opt._broadcast_params_from_rank = lambda r: [] if r == dp - 1 else sync(r)
    cap.optimizer(opt)
    with cap.step():
        loss = ddp(*mine)
        loss.backward()
        if c["clip"]:
            if c["bug"] == "local_norm":   # BUG: the norm of this rank's partition only
                mine_p = [p for g in opt.optim.param_groups for p in g["params"]]
                torch.nn.utils.clip_grad_norm_(mine_p, c["clip"])
            else:
                torch.nn.utils.clip_grad_norm_(ddp.parameters(), c["clip"])
        opt.step()
        logged = loss.detach().clone()
        dist.all_reduce(logged, op=dist.ReduceOp.AVG)
    cap.loss(logged, "loss")
