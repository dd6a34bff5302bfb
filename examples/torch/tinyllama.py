"""examples/torch/tinyllama.py - a Llama-style decoder written as people write one (nothing here
is verdict's but step()'s cap.* lines): nn.Embedding, nn.RMSNorm (or a hand-written RMSNorm,
--set norm=hand), rotary embeddings from torch.arange / torch.outer / cos / sin, attention with
F.scaled_dot_product_attention(is_causal=True) (--set attn=triu: an additive torch.triu -inf
mask), a SwiGLU MLP (F.silu), an untied head, F.cross_entropy, AdamW with weight decay and
clip_grad_norm_.  step(cap) is the single-device reference; tinyllama_ddp.py and
tinyllama_tp.py parallelize it (tests/e2e/54_torch_unseen.sh).
"""
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class ModelArgs:
    dim: int = 16
    n_layers: int = 1
    n_heads: int = 2
    vocab_size: int = 32
    hidden_dim: int = 32
    max_seq_len: int = 8
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0


class HandRMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def make_norm(a, kind):
    return HandRMSNorm(a.dim, a.norm_eps) if kind == "hand" else nn.RMSNorm(a.dim, eps=a.norm_eps)


def rope_tables(head_dim, seq_len, theta):
    freqs = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    angles = torch.outer(torch.arange(seq_len, dtype=torch.float64), freqs)
    emb = torch.cat([angles, angles], dim=-1)
    return emb.cos(), emb.sin()


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary(x, cos, sin):
    return x * cos + rotate_half(x) * sin


class Attention(nn.Module):
    def __init__(self, a, attn):
        super().__init__()
        self.head_dim = a.dim // a.n_heads
        self.wq = nn.Linear(a.dim, a.dim, bias=False)
        self.wk = nn.Linear(a.dim, a.dim, bias=False)
        self.wv = nn.Linear(a.dim, a.dim, bias=False)
        self.wo = nn.Linear(a.dim, a.dim, bias=False)
        self.attn = attn

    def forward(self, x, cos, sin):
        bsz, seqlen, _ = x.shape
        q = self.wq(x).view(bsz, seqlen, -1, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(bsz, seqlen, -1, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(bsz, seqlen, -1, self.head_dim).transpose(1, 2)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        if self.attn == "triu":
            mask = torch.triu(torch.full((seqlen, seqlen), float("-inf"), dtype=x.dtype), diagonal=1)
            scores = q @ k.transpose(2, 3) / math.sqrt(self.head_dim) + mask
            out = F.softmax(scores, dim=-1) @ v
        else:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(out.transpose(1, 2).reshape(bsz, seqlen, -1))


class FeedForward(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.w1 = nn.Linear(a.dim, a.hidden_dim, bias=False)
        self.w2 = nn.Linear(a.hidden_dim, a.dim, bias=False)
        self.w3 = nn.Linear(a.dim, a.hidden_dim, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    def __init__(self, a, norm, attn):
        super().__init__()
        self.attention_norm = make_norm(a, norm)
        self.attention = Attention(a, attn)
        self.ffn_norm = make_norm(a, norm)
        self.feed_forward = FeedForward(a)

    def forward(self, x, cos, sin):
        h = x + self.attention(self.attention_norm(x), cos, sin)
        return h + self.feed_forward(self.ffn_norm(h))


class Transformer(nn.Module):
    def __init__(self, a, norm="nn", attn="sdpa"):
        super().__init__()
        self.tok_embeddings = nn.Embedding(a.vocab_size, a.dim)
        self.layers = nn.ModuleList(TransformerBlock(a, norm, attn) for _ in range(a.n_layers))
        self.norm = make_norm(a, norm)
        self.output = nn.Linear(a.dim, a.vocab_size, bias=False)
        self.a = a

    def forward(self, tokens, labels):
        cos, sin = rope_tables(self.a.dim // self.a.n_heads, tokens.shape[1], self.a.rope_theta)
        h = self.tok_embeddings(tokens)
        for layer in self.layers:
            h = layer(h, cos.to(h.dtype), sin.to(h.dtype))
        logits = self.output(self.norm(h))
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), labels.reshape(-1))


def build(args):
    torch.manual_seed(0)
    model = Transformer(ModelArgs(), args.get("norm", "nn"), args.get("attn", "sdpa")).double()
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "norm" in n:
                p.add_(0.1 * torch.randn_like(p))
    return model


def data(batch=4):
    g = torch.Generator().manual_seed(7)
    tokens = torch.randint(0, ModelArgs.vocab_size, (batch, ModelArgs.max_seq_len), generator=g)
    return tokens, torch.roll(tokens, -1, dims=1)


def optimizer(params):
    return torch.optim.AdamW(params, lr=3e-3, betas=(0.9, 0.95), weight_decay=0.1)


def step(cap):
    model = build(cap.args)
    tokens, labels = data()
    cap.params(model)
    cap.input(tokens, "tokens")
    cap.input(labels, "labels")
    opt = optimizer(model.parameters())
    cap.optimizer(opt)
    with cap.step():
        loss = model(tokens, labels)
        loss.backward()
        if float(cap.args.get("clip", 1.0)):
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=float(cap.args.get("clip", 1.0)))
        opt.step()
        opt.zero_grad(set_to_none=True)
    cap.loss(loss, "loss")
