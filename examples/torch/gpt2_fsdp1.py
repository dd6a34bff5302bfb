"""examples/torch/gpt2_fsdp1.py - the GPT-2 of gpt2.py wrapped in the first FSDP,
torch.distributed.fsdp.FullyShardedDataParallel, as one writes it: each transformer block its own
unit (ModuleWrapPolicy), use_orig_params=True, FSDP's own clip_grad_norm_.  A unit's FlatParameter
concatenates its flattened parameters and shards that along its only dim, so a rank holds element
ranges of the parameters; torch2plan declares them as boxes of the parameters (docs/torch.md
"FSDP1").  The parallel program of gpt2_single.py (tools/torch2plan --nproc DP --set dp=DP; --set
opt=sgdm|adam|adamw, clip=X; strategy=shard_grad_op|no_shard (FULL_SHARD by default); wrap=manual:
each block wrapped by hand, then the root; orig=0 for use_orig_params=False, which torch2plan
refuses by name; accum=N accumulates N microbatches of the rank's share, the first N-1 under
no_sync()).
Bugs: --set bug=flat_sum: the flat gradient is reduce-scattered as a sum where the loss is a mean
(FSDP's gradient divide factors set to 1: each rank's gradient is DP times too large);
--set bug=no_root: the blocks wrapped by hand and the root forgotten, so the embeddings' and the
final norm's gradients are never reduced across ranks.
tests/e2e/53_torch_fsdp1.sh.
"""
import contextlib
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp import ShardingStrategy
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
    kw = dict(sharding_strategy=ShardingStrategy[cap.args.get("strategy", "full_shard").upper()],
              use_orig_params=cap.args.get("orig", "1") == "1", device_id=torch.device("cpu"))
    if cap.args.get("wrap") == "manual" or c["bug"] == "no_root":   # each block wrapped by hand
        for i, b in enumerate(model.h):
            model.h[i] = FSDP(b, **kw)
        # BUG (no_root): the root left unwrapped: nothing reduces the embeddings' gradients
        fsdp = model if c["bug"] == "no_root" else FSDP(model, **kw)
    else:
        fsdp = FSDP(model, auto_wrap_policy=ModuleWrapPolicy({block}), **kw)
    if c["bug"] == "flat_sum":   # BUG: the reduce-scatter sums where the loss is a mean
        for unit in FSDP.fsdp_modules(fsdp):
            unit._gradient_predivide_factor = unit._gradient_postdivide_factor = 1.0
    cap.params(fsdp)   # each rank's boxes of the parameters, from FSDP's flat-parameter layout
    cap.input(mine[0], "idx", dp=Shard(0))
    cap.input(mine[1], "targets", dp=Shard(0))
    opt = gpt2.make_optimizer(c, fsdp.parameters())
    cap.optimizer(opt)
    accum = int(c.get("accum", 1))
    with cap.step():
        if accum > 1:   # the first accum-1 backwards under no_sync(): FSDP reduces in the last
            loss = 0
            for m, (x, y) in enumerate(zip(*(t.chunk(accum) for t in mine))):
                with contextlib.nullcontext() if m == accum - 1 else fsdp.no_sync():
                    part = fsdp(x, y)
                    (part / accum).backward()
                loss = loss + part.detach() / accum
        else:
            loss = fsdp(*mine)
            loss.backward()
        if c["clip"]:   # the norm of the sharded gradients, all-reduced by FSDP
            fsdp.clip_grad_norm_(c["clip"])
        opt.step()
        logged = loss.detach().clone()
        dist.all_reduce(logged, op=dist.ReduceOp.AVG)
    cap.loss(logged, "loss")
