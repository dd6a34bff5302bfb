"""examples/torch/seqcls.py - a small sequence classifier written in yet another style: a
hand-written LayerNorm (x.mean / x.var / torch.rsqrt), a fused qkv projection split in three,
attention with torch.einsum and nanoGPT's causal buffer (`bias[:, :, :T, :T] == 0`), the MLP as
an nn.Sequential with nn.GELU(approximate="tanh") and nn.Dropout(0.0), blocks in an
nn.ModuleList, a head over torch.cat of the mean-pooled and the last token's features, Adam,
and gradient accumulation over 2 microbatches (step(cap): the single-device reference;
seqcls_ddp.py: DistributedDataParallel with no_sync(); tests/e2e/54_torch_unseen.sh).
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

D, HEADS, LAYERS, VOCAB, SEQ, CLASSES, BATCH, ACCUM = 16, 2, 2, 24, 8, 5, 8, 2


class LayerNorm(nn.Module):
    def __init__(self, d, eps=1e-5):
        super().__init__()
        self.g = nn.Parameter(torch.ones(d))
        self.b = nn.Parameter(torch.zeros(d))
        self.eps = eps

    def forward(self, x):
        mu = x.mean(-1, keepdim=True)
        var = x.var(-1, keepdim=True, unbiased=False)
        return (x - mu) * torch.rsqrt(var + self.eps) * self.g + self.b


class SelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(D, 3 * D)
        self.proj = nn.Linear(D, D)
        self.drop = nn.Dropout(0.0)
        self.register_buffer("bias", torch.tril(torch.ones(SEQ, SEQ)).view(1, 1, SEQ, SEQ))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = (t.reshape(B, T, HEADS, C // HEADS).transpose(1, 2) for t in (q, k, v))
        att = torch.einsum("bhqd,bhkd->bhqk", q, k) * (1.0 / math.sqrt(C // HEADS))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = self.drop(att.softmax(dim=-1))
        y = torch.einsum("bhqk,bhkd->bhqd", att, v)
        return self.drop(self.proj(y.transpose(1, 2).contiguous().view(B, T, C)))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.attn, self.ln2 = LayerNorm(D), SelfAttention(), LayerNorm(D)
        self.mlp = nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(approximate="tanh"),
                                 nn.Linear(4 * D, D), nn.Dropout(0.0))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D)
        self.pos = nn.Parameter(0.02 * torch.randn(1, SEQ, D))
        self.blocks = nn.ModuleList([Block() for _ in range(LAYERS)])
        self.ln_f = LayerNorm(D)
        self.head = nn.Linear(2 * D, CLASSES)

    def forward(self, ids, y):
        x = self.embed(ids) + self.pos[:, :ids.size(1)]
        for blk in self.blocks:
            x = blk(x)
        x = self.ln_f(x)
        feats = torch.cat([x.mean(dim=1), x[:, -1]], dim=-1)
        return F.cross_entropy(self.head(feats), y)


def build():
    torch.manual_seed(5)
    model = Classifier().double()
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n.endswith(".b") or n.endswith(".g"):
                p.add_(0.1 * torch.randn_like(p))
    return model


def data():
    g = torch.Generator().manual_seed(3)
    return torch.randint(0, VOCAB, (BATCH, SEQ), generator=g), torch.randint(0, CLASSES, (BATCH,), generator=g)


def step(cap):
    model = build()
    ids, y = data()
    cap.params(model)
    cap.input(ids, "ids")
    cap.input(y, "y")
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    cap.optimizer(opt)
    accum = int(cap.args.get("accum", ACCUM))
    with cap.step():
        total = 0.0
        for xb, yb in zip(ids.chunk(accum), y.chunk(accum)):
            loss = model(xb, yb) / accum
            loss.backward()
            total = total + loss.detach()
        opt.step()
        opt.zero_grad()
    cap.loss(total, "loss")
