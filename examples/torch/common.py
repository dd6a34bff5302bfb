"""examples/torch/common.py - what the single-device and the parallel program share:
the model size, the initial weights (as a checkpoint would hold them) and the data batch.

Both programs load the same full weights and the same global batch; the parallel program
slices them as a real checkpoint loader and data loader would.  Everything is float64 by default
so that the captured step can be compared with verdict's numeric executor to rounding;
--set dtype=float32 or dtype=bfloat16 runs the step in that precision (the weights, tables and
activations are cast once, before the step), as `make noise-demo` does for `verdict compare`.
"""
import math

import torch

torch.set_default_dtype(torch.float64)

VOCAB, HIDDEN, HEADS, FFN, LAYERS, SEQ, BATCH = 32, 16, 2, 32, 2, 8, 4
HEAD_DIM = HIDDEN // HEADS
EPS = 1e-5
THETA = 10000.0
LR = 0.05


def config(args):
    """Run configuration from torch2plan --set KEY=VALUE (strings)."""
    c = {"tp": 1, "pp": 1, "dp": 1, "nm": 1, "sp": 0, "opt": "sgd", "tie": 0, "bucket": 0, "bug": "", "avg": "loss",
         "dtype": "float64"}
    for k, v in args.items():
        c[k] = v if k in ("opt", "bug", "avg", "dtype") else int(v)
    return c


def dtype(c):
    """The precision of the step (--set dtype=float64|float32|bfloat16)."""
    return {"float64": torch.float64, "float32": torch.float32, "bfloat16": torch.bfloat16}[c["dtype"]]


def full_weights(tie):
    """name -> full tensor, in the single-device program's naming."""
    g = torch.Generator().manual_seed(1234)

    def rnd(*shape, scale=None):
        s = scale if scale is not None else 1.0 / math.sqrt(shape[-1])
        return torch.randn(*shape, generator=g) * s

    w = {"tok.weight": rnd(VOCAB, HIDDEN, scale=0.5)}
    for i in range(LAYERS):
        p = "layers.%d." % i
        w[p + "attn_norm.weight"] = 1.0 + 0.1 * rnd(HIDDEN, scale=1.0)
        for n in ("wq", "wk", "wv", "wo"):
            w[p + n + ".weight"] = rnd(HIDDEN, HIDDEN)
        w[p + "mlp_norm.weight"] = 1.0 + 0.1 * rnd(HIDDEN, scale=1.0)
        w[p + "w1.weight"] = rnd(FFN, HIDDEN)
        w[p + "w3.weight"] = rnd(FFN, HIDDEN)
        w[p + "w2.weight"] = rnd(HIDDEN, FFN)
    w["norm.weight"] = 1.0 + 0.1 * rnd(HIDDEN, scale=1.0)
    if not tie:
        w["head.weight"] = rnd(VOCAB, HIDDEN)
    return w


def batch():
    g = torch.Generator().manual_seed(99)
    tokens = torch.randint(0, VOCAB, (BATCH, SEQ), generator=g)
    labels = torch.randint(0, VOCAB, (BATCH, SEQ), generator=g)
    return tokens, labels


def rope_tables():
    """cos, sin of shape [SEQ, 1, HEAD_DIM] (half-split pairs) and the additive causal mask."""
    inv = THETA ** (-torch.arange(0, HEAD_DIM, 2, dtype=torch.float64) / HEAD_DIM)
    ang = torch.outer(torch.arange(SEQ, dtype=torch.float64), inv)
    ang = torch.cat((ang, ang), dim=-1)
    mask = torch.triu(torch.full((SEQ, SEQ), -1e4), diagonal=1)
    return ang.cos().unsqueeze(1), ang.sin().unsqueeze(1), mask


def make_optimizer(c, params):
    if c["opt"] == "adam":
        return torch.optim.Adam(params, lr=LR, betas=(0.9, 0.95), eps=1e-8)
    return torch.optim.SGD(params, lr=LR)
