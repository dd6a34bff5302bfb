"""examples/torch/gpt2_ddp.py - the GPT-2 of gpt2.py trained data-parallel with PyTorch's own
DistributedDataParallel (its C++ bucketed reducer averages the gradients), as one writes it:
each rank takes its share of the global batch, computes the mean loss over it, and DDP does the
rest.  The parallel program of gpt2_single.py (tools/torch2plan --nproc DP, --set dp=DP).
--set bucket_mb=X sets DDP's bucket size (small values make several buckets); --set accum=N
accumulates the gradients of N microbatches of the rank's share, the first N-1 under no_sync();
--set ddp=find_unused,static,bucket_view,no_bcast (any of them) sets find_unused_parameters,
static_graph, gradient_as_bucket_view, broadcast_buffers=False.
Bugs (--set bug=NAME): loss_scale multiplies the loss by the world size before backward (a port
from a sum-reduced loss: DDP already averages); same_data gives every rank the first shard;
ignored leaves the last block's MLP weight out of DDP's reducer (its gradient stays the
rank's own); accum_nodiv does not divide the microbatches' losses by their count.
"""
import contextlib
import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt2  # noqa: E402
from torchcap import Shard  # noqa: E402


BUG = ""


def accumulate(ddp, batch, n, divide=True):
    """Gradient accumulation over n microbatches; DDP reduces once, in the last backward."""
    total = 0
    for m, (x, y) in enumerate(zip(*(t.chunk(n) for t in batch))):
        sync = contextlib.nullcontext() if m == n - 1 else ddp.no_sync()
        with sync:
            loss = ddp(x, y)
            (loss / n if divide else loss).backward()
        total = total + loss.detach()
    return total / n


def mean_hook(group, bucket):
    """A user's comm hook: sum the bucket over the group, then divide by its size."""
    buf = bucket.buffer()
    fut = dist.all_reduce(buf, group=group, async_op=True).get_future()
    n = 1 if BUG == "hook_nodiv" else dist.get_world_size(group)   # BUG: the sum, not the mean
    return fut.then(lambda f: f.value()[0].div_(n))


# --set ddp=NAME,NAME: DistributedDataParallel's boolean options, set to the other value than
# their default
DDP_OPTIONS = {"find_unused": ("find_unused_parameters", True), "static": ("static_graph", True),
               "bucket_view": ("gradient_as_bucket_view", True), "no_bcast": ("broadcast_buffers", False)}


def ddp_options(c):
    return dict(DDP_OPTIONS[n] for n in c.get("ddp", "").split(",") if n)


def register_hook(ddp, name):
    """--set hook=allreduce|fp16|bf16|user: DDP's stock hooks or mean_hook above."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    hooks = {"allreduce": default_hooks.allreduce_hook, "fp16": default_hooks.fp16_compress_hook,
             "bf16": default_hooks.bf16_compress_hook, "user": mean_hook}
    ddp.register_comm_hook(dist.group.WORLD, hooks[name])


def step(cap):
    global BUG
    c = gpt2.config(cap.args)
    BUG = c["bug"]
    dp = int(c["dp"]) if int(c["dp"]) > 1 else cap.world
    cap.mesh(dp=dp)
    model = gpt2.build(c)
    idx, targets = gpt2.batch()
    share = 0 if c["bug"] == "same_data" else cap.rank
    mine = [t.chunk(dp)[share].clone() for t in (idx, targets)]
    cap.params(model)
    cap.input(mine[0], "idx", dp=Shard(0))
    cap.input(mine[1], "targets", dp=Shard(0))
    last_fc = [n for n, _ in model.named_parameters() if n.endswith("mlp.fc.weight")][-1]
    if c["bug"] == "ignored":   # BUG: a parameter DDP does not reduce
        DDP._set_params_and_buffers_to_ignore_for_model(model, [last_fc])
    ddp = DDP(model, bucket_cap_mb=float(c.get("bucket_mb", 25)), **ddp_options(c))
    if c.get("hook"):
        register_hook(ddp, c["hook"])
    accum = int(c.get("accum", 1))
    opt = gpt2.make_optimizer(c, ddp.parameters())
    cap.optimizer(opt)
    with cap.step():
        if accum > 1:
            loss = accumulate(ddp, mine, accum, divide=c["bug"] != "accum_nodiv")
        else:
            loss = ddp(*mine)
            if c["bug"] == "loss_scale":
                (loss * dist.get_world_size()).backward()   # BUG: DDP averages already
            else:
                loss.backward()
        if c["clip"]:   # the gradients are the reduced, replicated ones: every rank the same norm
            torch.nn.utils.clip_grad_norm_(ddp.parameters(), c["clip"])
        opt.step()
        # the logged loss: the mean of the replicas' means (each over its share of the batch)
        logged = loss.detach().clone()
        dist.all_reduce(logged, op=dist.ReduceOp.AVG)
    cap.loss(logged, "loss")
