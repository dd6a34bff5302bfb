"""examples/torch/gpt2_fsdp1.py - the GPT-2 of gpt2.py wrapped in the first FSDP,
torch.distributed.fsdp.FullyShardedDataParallel, as one writes it: each transformer block its own
unit (ModuleWrapPolicy), use_orig_params=True.  torch2plan REFUSES it (exit 2, naming FSDP2 as
the way): a unit's FlatParameter concatenates its flattened parameters and shards that along its
only dim, so a rank holds element ranges of the parameters, which are no slices of them.  Kept as
the program tests/e2e/52_torch_fsdp.sh checks the refusal on; gpt2_fsdp.py is the FSDP2 version.
"""
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp.wrap import ModuleWrapPolicy

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt2  # noqa: E402
from torchcap import Shard  # noqa: E402


def step(cap):
    c = gpt2.config(cap.args)
    dp = int(c["dp"]) if int(c["dp"]) > 1 else cap.world
    cap.mesh(dp=dp)
    model = gpt2.build(c)
    idx, targets = gpt2.batch()
    mine = [t.chunk(dp)[cap.rank].clone() for t in (idx, targets)]
    block = type(model.h[0])
    fsdp = FSDP(model, auto_wrap_policy=ModuleWrapPolicy({block}), use_orig_params=True,
                device_id=torch.device("cpu"))
    cap.params(fsdp)
    cap.input(mine[0], "idx", dp=Shard(0))
    cap.input(mine[1], "targets", dp=Shard(0))
    opt = gpt2.make_optimizer(c, fsdp.parameters())
    cap.optimizer(opt)
    with cap.step():
        loss = fsdp(*mine)
        loss.backward()
        if c["clip"]:
            fsdp.clip_grad_norm_(c["clip"])
        opt.step()
        logged = loss.detach().clone()
        dist.all_reduce(logged, op=dist.ReduceOp.AVG)
    cap.loss(logged, "loss")
