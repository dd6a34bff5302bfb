"""examples/torch/gpt2.py - a small GPT-2, written the way people write it: nn.Embedding for
tokens and learned positions (torch.arange), pre-LayerNorm blocks, causal self-attention with a
masked_fill of a boolean mask, a GELU MLP, the output head tied to the token embedding, and
F.cross_entropy (--set attn=sdpa: F.scaled_dot_product_attention instead).  Nothing here knows
about parallelism: gpt2_single.py trains it on one device, gpt2_ddp.py data-parallel with
DistributedDataParallel (tests/e2e/44_torch_gpt2.sh).

`build(args)` gives the model with its deterministic initial weights (every program starts from
the same checkpoint), `batch()` the global batch, `make_optimizer` the optimizer of --set opt=.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB, N_EMBD, N_HEAD, N_LAYER, BLOCK, BATCH = 32, 16, 2, 2, 8, 4
LR = 0.05


def config(args):
    """Run configuration from torch2plan --set KEY=VALUE (strings)."""
    c = {"dp": 1, "tp": 1, "pp": 1, "nm": 1, "opt": "sgd", "bug": "", "schedule": "gpipe", "clip": 0.0,
         "attn": "mask", "dtype": "f64", "ckpt": 0}
    for k, v in args.items():
        c[k] = type(c[k])(v) if k in c and not isinstance(c[k], str) else v
    return c


class CausalSelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.q_proj = nn.Linear(N_EMBD, N_EMBD)
        self.k_proj = nn.Linear(N_EMBD, N_EMBD)
        self.v_proj = nn.Linear(N_EMBD, N_EMBD)
        self.out_proj = nn.Linear(N_EMBD, N_EMBD)
        self.register_buffer("mask", torch.ones(BLOCK, BLOCK, dtype=torch.bool).tril(), persistent=False)
        self.sdpa = False   # --set attn=sdpa: F.scaled_dot_product_attention(is_causal=True)

    def forward(self, x):
        b, t, _ = x.shape
        heads = self.q_proj.out_features // (N_EMBD // N_HEAD)   # fewer on a tensor-parallel rank
        q, k, v = (p(x).view(b, t, heads, -1).transpose(1, 2) for p in (self.q_proj, self.k_proj, self.v_proj))
        if self.sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
            att = att.masked_fill(~self.mask[:t, :t], float("-inf"))
            y = F.softmax(att, dim=-1) @ v
        return self.out_proj(y.transpose(1, 2).reshape(b, t, -1))


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(N_EMBD, 4 * N_EMBD)
        self.proj = nn.Linear(4 * N_EMBD, N_EMBD)

    def forward(self, x):
        return self.proj(F.gelu(self.fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = nn.LayerNorm(N_EMBD)
        self.attn = CausalSelfAttention()
        self.ln_2 = nn.LayerNorm(N_EMBD)
        self.mlp = MLP()

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(VOCAB, N_EMBD)
        self.wpe = nn.Embedding(BLOCK, N_EMBD)
        self.h = nn.ModuleList(Block() for _ in range(N_LAYER))
        self.ln_f = nn.LayerNorm(N_EMBD)
        self.lm_head = nn.Linear(N_EMBD, VOCAB, bias=False)
        self.lm_head.weight = self.wte.weight        # tied

    def forward(self, idx, targets):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = checkpoint(block, x, use_reentrant=False) if self.ckpt else block(x)  # --set ckpt=1
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


def build(c=None, dtype=None):
    """The model with the shared initial weights (seeded: the same checkpoint on every rank);
    c (config()) chooses the attention kernel and the dtype (--set dtype=f32: FSDP1's
    clip_grad_norm_ computes its norms in float32 and refuses float64 gradients)."""
    if dtype is None:
        dtype = torch.float32 if c and c.get("dtype") == "f32" else torch.float64
    torch.manual_seed(1234)
    model = GPT2().to(dtype)
    model.ckpt = bool(c) and bool(c["ckpt"])
    for m in model.modules():
        if isinstance(m, CausalSelfAttention):
            m.sdpa = bool(c) and c["attn"] == "sdpa"
    with torch.no_grad():               # non-trivial norms and biases, so that every term shows
        for name, p in model.named_parameters():
            if name.endswith("bias") or ".ln_" in name or name.startswith("ln_"):
                p.add_(0.1 * torch.randn(p.shape, dtype=dtype))
    return model


def batch(dtype=torch.float64):
    g = torch.Generator().manual_seed(99)
    idx = torch.randint(0, VOCAB, (BATCH, BLOCK), generator=g)
    targets = torch.randint(0, VOCAB, (BATCH, BLOCK), generator=g)
    return idx, targets


def make_optimizer(c, params):
    if c["opt"] == "adamw":
        return torch.optim.AdamW(params, lr=LR, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    if c["opt"] == "adam":
        return torch.optim.Adam(params, lr=LR, betas=(0.9, 0.95), eps=1e-8)
    if c["opt"] == "sgdm":
        return torch.optim.SGD(params, lr=LR, momentum=0.9, weight_decay=0.01)
    if c["opt"] == "nesterov":
        return torch.optim.SGD(params, lr=LR, momentum=0.9, dampening=0.0, nesterov=True, weight_decay=0.01)
    return torch.optim.SGD(params, lr=LR)


# --set ckpt=1: activation checkpointing (each block's forward runs again inside the backward);
# imported here so that the line numbers of the model above stay those the tests name
from torch.utils.checkpoint import checkpoint  # noqa: E402
