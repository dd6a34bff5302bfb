"""tests/torch/tiny_parallel.py - the MLP of tiny_single.py on tp x dp ranks (column-parallel
w1, row-parallel w2 with its all_reduce, a DP gradient all_reduce).  --set variant=NAME
injects one problem: replica (DP replica 1 runs one more operator), shape (a placement that
does not match the tensor)."""
import torch
import torch.distributed as dist

from tiny_single import data
from torchcap import Shard

torch.set_default_dtype(torch.float64)


class Reduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        x = x.clone()
        dist.all_reduce(x, group=G["tp"])
        return x

    @staticmethod
    def backward(ctx, g):
        return g


class Copy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        g = g.clone()
        dist.all_reduce(g, group=G["tp"])
        return g


G = {}


def step(cap):
    tp, dp = int(cap.args.get("tp", 2)), int(cap.args.get("dp", 1))
    v = cap.args.get("variant", "")
    me = cap.mesh(tp=tp, dp=dp)
    G["tp"], G["dp"] = cap.group("tp"), cap.group("dp")
    w1, w2, x, y = data()
    t, d = me["tp"], me["dp"]
    w1 = w1.chunk(tp, 0)[t].clone().requires_grad_()
    w2 = w2.chunk(tp, 1)[t].clone().requires_grad_()
    rows = slice(d * 6 // dp, (d + 1) * 6 // dp)
    x, y = x[rows].clone(), y[rows].clone()
    cap.param(w1, "w1", tp=Shard(0))
    cap.param(w2, "w2", tp=Shard(0) if v == "shape" else Shard(1))
    cap.input(x, "x", dp=Shard(0))
    if v == "unread":
        cap.input(torch.ones(6, 4), "unused")
    cap.input(y, "y", dp=Shard(0))
    opt = torch.optim.SGD([w1, w2], lr=0.1)
    cap.optimizer(opt)
    with cap.step():
        h = Copy.apply(x) @ w1.t()
        if v == "replica" and d == 1:
            h = h * 1.0
        z = Reduce.apply(torch.nn.functional.silu(h) @ w2.t())
        loss = torch.nn.functional.cross_entropy(z, y)
        loss.backward()
        for p in (w1, w2):
            dist.all_reduce(p.grad, group=G["dp"])
            p.grad.div_(dp)
        opt.step()
