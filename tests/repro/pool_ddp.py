import torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torchcap import Shard
import pool
def step(cap):
    cap.mesh(dp=cap.world)
    m = pool.build(); ids, y = (t.chunk(2)[dist.get_rank()].clone() for t in pool.data())
    cap.params(m); cap.input(ids, "ids", dp=Shard(0)); cap.input(y, "y", dp=Shard(0))
    d = DDP(m); opt = torch.optim.Adam(d.parameters(), lr=1e-3); cap.optimizer(opt)
    with cap.step():
        loss = d(ids, y); loss.backward(); opt.step()
        dist.all_reduce(loss.detach(), op=dist.ReduceOp.AVG)
    cap.loss(loss, "loss")
