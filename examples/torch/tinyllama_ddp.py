"""examples/torch/tinyllama_ddp.py - tinyllama.py under DistributedDataParallel: each rank
trains on its slice of the batch; DDP averages the gradients.
--set bug=nodiv: the loss is summed over the tokens (reduction="sum") where the reference averages.
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
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        dist.all_reduce(loss, op=dist.ReduceOp.AVG)
    cap.loss(loss, "loss")
