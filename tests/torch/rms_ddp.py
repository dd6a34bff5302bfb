"""tests/torch/rms_ddp.py - rms_single.py under DistributedDataParallel: each rank its share of
the batch, DDP's reducer averaging, the logged loss the mean of the ranks' losses."""
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from rms_single import build, data, train
from torchcap import Shard


def step(cap):
    cap.mesh(dp=cap.world)
    m = build()
    ids, tgt = [t.chunk(cap.world)[cap.rank].contiguous() for t in data()]
    cap.params(m)
    cap.input(ids, "ids", dp=Shard(0))
    cap.input(tgt, "tgt", dp=Shard(0))

    def log(loss):
        logged = loss.detach().clone()
        dist.all_reduce(logged)
        return logged / cap.world
    cap.loss(train(cap, DDP(m), ids, tgt, log), "loss")
