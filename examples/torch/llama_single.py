"""examples/torch/llama_single.py - the single-device reference: a tiny Llama (RMSNorm, rotary
attention, SwiGLU MLP, tied or untied embedding, cross-entropy), one SGD or Adam step.

Captured by tools/torch2plan as the single-device program (docs/torch.md).
"""
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (EPS, HEAD_DIM, HEADS, LAYERS, batch, config, dtype, full_weights,  # noqa: E402
                    make_optimizer, rope_tables)


def rmsnorm(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * w


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def attention(x, p, W, cos, sin, mask):
    b, s, _ = x.shape
    q = F.linear(x, W[p + "wq.weight"]).view(b, s, HEADS, HEAD_DIM)
    k = F.linear(x, W[p + "wk.weight"]).view(b, s, HEADS, HEAD_DIM)
    v = F.linear(x, W[p + "wv.weight"]).view(b, s, HEADS, HEAD_DIM)
    q = q * cos + rotate_half(q) * sin
    k = k * cos + rotate_half(k) * sin
    q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    scores = q @ k.transpose(-2, -1) * (HEAD_DIM ** -0.5) + mask
    o = torch.softmax(scores, dim=-1) @ v
    o = o.transpose(1, 2).reshape(b, s, HEADS * HEAD_DIM)
    return F.linear(o, W[p + "wo.weight"])


def mlp(x, p, W):
    return F.linear(F.silu(F.linear(x, W[p + "w1.weight"])) * F.linear(x, W[p + "w3.weight"]), W[p + "w2.weight"])


def forward(W, tokens, labels, cos, sin, mask, tie):
    h = F.embedding(tokens, W["tok.weight"])
    for i in range(LAYERS):
        p = "layers.%d." % i
        h = h + attention(rmsnorm(h, W[p + "attn_norm.weight"]), p, W, cos, sin, mask)
        h = h + mlp(rmsnorm(h, W[p + "mlp_norm.weight"]), p, W)
    h = rmsnorm(h, W["norm.weight"])
    logits = F.linear(h, W["tok.weight"] if tie else W["head.weight"])
    return F.cross_entropy(logits.view(-1, logits.shape[-1]), labels.view(-1))


def step(cap):
    c = config(cap.args)
    dt = dtype(c)
    W = {n: t.to(dt).requires_grad_() for n, t in full_weights(c["tie"]).items()}
    tokens, labels = batch()
    cos, sin, mask = (t.to(dt) for t in rope_tables())
    for n, t in W.items():
        cap.param(t, n)
    cap.input(tokens, "tokens")
    cap.input(labels, "labels")
    cap.input(cos, "rope.cos")
    cap.input(sin, "rope.sin")
    cap.input(mask, "mask")
    opt = make_optimizer(c, list(W.values()))
    cap.optimizer(opt)
    with cap.step():
        loss = forward(W, tokens, labels, cos, sin, mask, c["tie"])
        loss.backward()
        opt.step()
    cap.loss(loss, "loss")
