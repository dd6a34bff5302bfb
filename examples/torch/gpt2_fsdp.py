"""examples/torch/gpt2_fsdp.py - the GPT-2 of gpt2.py trained fully sharded with FSDP2, as one
writes it with torch.distributed.fsdp.fully_shard: each transformer block is its own FSDP unit,
the root unit holds the embeddings and the tied head.  Every rank stores dim-0 shards of the
parameters (DTensors placed Shard(0) on the dp mesh) and of the optimizer state; FSDP all-gathers
a unit's parameters before its forward and backward and reduce-scatters (averaging) its
gradients.  The parallel program of gpt2_single.py (tools/torch2plan --nproc DP --set dp=DP;
--set opt=sgdm|adam|adamw, clip=X; accum=N accumulates N microbatches of the rank's share, the
first N-1 with set_requires_gradient_sync(False); hsdp=R: HSDP, a 2-D mesh of R replicas, each
sharding the parameters DP/R ways: FSDP reduce-scatters in the shard group, then all-reduces
across the replicas; mp=bf16|f32 computes in that precision with MixedPrecisionPolicy, rd=f32
reduces the gradients in float32; offload=1 keeps the shards and the optimizer step on the CPU
with CPUOffloadPolicy (pin=1 pins memory, which needs CUDA: refused by name)).
Bugs (--set bug=NAME): sum_rs reduce-scatters the gradients as a sum where the loss is a mean
(FSDP's gradient divide factor set to 1: each rank's gradient is DP times too large);
no_rep_reduce (with hsdp) leaves set_requires_all_reduce(False) on (as for an accumulation
step): FSDP then keeps the shard group's sums for a later all-reduce, the parameters get no
gradient and the optimizer leaves them as they were.
tests/e2e/52_torch_fsdp.sh; docs/torch.md "FSDP2".
"""
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt2  # noqa: E402
from torchcap import Shard  # noqa: E402


def policies(c):
    """fully_shard's mixed precision and CPU offload, as --set mp=, rd=, offload= choose."""
    kw = {}
    if c.get("mp"):   # compute in mp, reduce gradients in rd (mp by default)
        dt = {"bf16": torch.bfloat16, "f32": torch.float32, "f64": torch.float64}
        kw["mp_policy"] = MixedPrecisionPolicy(param_dtype=dt[c["mp"]], reduce_dtype=dt[c.get("rd", c["mp"])])
    if c.get("offload"):   # CPU ranks: pinning needs CUDA (torch2plan refuses pin=1 by name)
        kw["offload_policy"] = CPUOffloadPolicy(pin_memory=c.get("pin", "0") == "1")
    return kw


def step(cap):
    c = gpt2.config(cap.args)
    dp = int(c["dp"]) if int(c["dp"]) > 1 else cap.world
    rep = int(c.get("hsdp", 1))   # HSDP: rep replicas of a parameter, each sharded dp/rep ways
    if rep > 1:
        cap.mesh(shard=dp // rep, dp=rep)
        mesh = init_device_mesh("cpu", (rep, dp // rep), mesh_dim_names=("dp", "shard"))
    else:
        cap.mesh(dp=dp)
        mesh = init_device_mesh("cpu", (dp,), mesh_dim_names=("dp",))
    model = gpt2.build(c)
    idx, targets = gpt2.batch()
    mine = [t.chunk(dp)[cap.rank].clone() for t in (idx, targets)]
    kw = policies(c)
    units = [fully_shard(block, mesh=mesh, **kw) for block in model.h] + [fully_shard(model, mesh=mesh, **kw)]
    cap.params(model)   # DTensor parameters, Shard(0) over dp: the layout comes from FSDP
    split = {"dp": Shard(0), "shard": Shard(0)} if rep > 1 else {"dp": Shard(0)}   # the batch
    cap.input(mine[0], "idx", **split)
    cap.input(mine[1], "targets", **split)
    if c["bug"] == "sum_rs":   # BUG: the reduce-scatter sums where the loss is a mean
        for u in units:
            u.set_gradient_divide_factor(1.0)
    if c["bug"] == "no_rep_reduce":   # BUG: HSDP's all-reduce across the replicas is skipped
        model.set_requires_all_reduce(False)
    opt = gpt2.make_optimizer(c, model.parameters())
    cap.optimizer(opt)
    accum = int(c.get("accum", 1))
    with cap.step():
        if accum > 1:   # gradient accumulation: FSDP reduce-scatters once, in the last backward
            loss = 0
            for m, (x, y) in enumerate(zip(*(t.chunk(accum) for t in mine))):
                model.set_requires_gradient_sync(m == accum - 1)
                part = model(x, y)
                (part / accum).backward()
                loss = loss + part.detach() / accum
        else:
            loss = model(*mine)
            loss.backward()
        if c["clip"]:   # DTensor gradients: the norm of the sharded gradients, all-reduced
            torch.nn.utils.clip_grad_norm_(model.parameters(), c["clip"])
        opt.step()
        logged = loss.detach().clone()
        dist.all_reduce(logged, op=dist.ReduceOp.AVG)
    cap.loss(logged, "loss")
