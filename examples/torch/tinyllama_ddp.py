"""examples/torch/tinyllama_ddp.py - tinyllama.py under DistributedDataParallel: each rank
trains on its slice of the batch; DDP averages the gradients.
--set bug=double_avg: the loss is divided by the world size although DDP averages already.
"""
import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tinyllama  # noqa: E402
from torchcap import Shard  # noqa: E402


def step(cap):
    cap.mesh(dp=cap.world)
    model = tinyllama.build(cap.args)
    tokens, labels = tinyllama.data()
    tokens = tokens.chunk(cap.world)[dist.get_rank()].clone()
    labels = labels.chunk(cap.world)[dist.get_rank()].clone()
    cap.params(model)
    cap.input(tokens, "tokens", dp=Shard(0))
    cap.input(labels, "labels", dp=Shard(0))
    model = DDP(model)
    opt = tinyllama.optimizer(model.parameters())
    cap.optimizer(opt)
    with cap.step():
        loss = model(tokens, labels)
        if cap.args.get("bug") == "double_avg":
            loss = loss / dist.get_world_size()   # BUG: DDP averages the gradients already
        loss.backward()
        if float(cap.args.get("clip", 1.0)):
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=float(cap.args.get("clip", 1.0)))
        opt.step()
        opt.zero_grad(set_to_none=True)
        dist.all_reduce(loss, op=dist.ReduceOp.AVG)
    cap.loss(loss, "loss")
