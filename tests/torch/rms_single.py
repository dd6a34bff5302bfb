"""tests/torch/rms_single.py - a small language model as one writes it today, trained on one
device: nn.RMSNorm, a SiLU MLP with bias-free linears, nn.Dropout(0.0), an untied head,
F.cross_entropy over flattened logits, AdamW with betas (0.9, 0.95), a LambdaLR scheduler,
opt.zero_grad(set_to_none=True) inside the step and clip_grad_norm_ (--set clip=0: none).
The reference of rms_ddp.py and rms_tp.py (tests/e2e/55_torch_rmsnorm.sh)."""
import contextlib

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.set_default_dtype(torch.float64)


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.norm = nn.RMSNorm(d)
        self.up = nn.Linear(d, 4 * d, bias=False)
        self.down = nn.Linear(4 * d, d, bias=False)
        self.drop = nn.Dropout(0.0)

    def forward(self, x):
        return x + self.drop(self.down(F.silu(self.up(self.norm(x)))))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(20, 8)
        self.blocks = nn.ModuleList([Block(8) for _ in range(2)])
        self.norm = nn.RMSNorm(8)
        self.head = nn.Linear(8, 20, bias=False)

    def forward(self, ids):
        x = self.emb(ids)
        for b in self.blocks:
            x = b(x)
        return self.head(self.norm(x))


def build():
    torch.manual_seed(0)
    return Net()


def data():
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 20, (4, 6), generator=g)
    return ids, torch.roll(ids, -1, 1)


def train(cap, model, ids, tgt, log=lambda loss: loss, loss_ctx=contextlib.nullcontext):
    """One step; log maps the local loss to the logged one (a parallel program's mean), the
    loss and its backward run under loss_ctx() (DTensor's loss_parallel)."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01, betas=(0.9, 0.95))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    cap.optimizer(opt)
    with cap.step():
        opt.zero_grad(set_to_none=True)
        logits = model(ids)
        with loss_ctx():
            loss = F.cross_entropy(logits.flatten(0, 1), tgt.reshape(-1))
            loss.backward()
        if cap.args.get("clip", "1") == "1":
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        loss = log(loss)
    return loss


def step(cap):
    m = build()
    ids, tgt = data()
    cap.params(m)
    cap.input(ids, "ids")
    cap.input(tgt, "tgt")
    cap.loss(train(cap, m, ids, tgt), "loss")
