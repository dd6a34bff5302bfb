"""examples/torch/mlm.py - a small pre-norm transformer language model written with PyTorch's
building blocks: nn.LayerNorm(elementwise_affine=True), nn.Linear layers with biases, attention
through F.scaled_dot_product_attention(is_causal=True) on heads made with .unflatten / .permute,
an nn.GELU MLP, a final norm and an untied head, F.cross_entropy and AdamW with decoupled weight
decay on the matrices only (two parameter groups).  step(cap) is the single-device reference;
mlm_fsdp.py shards it with FSDP2's fully_shard (tests/e2e/54_torch_unseen.sh).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB, DIM, HEADS, LAYERS, SEQ, BATCH = 32, 16, 2, 1, 8, 4


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm1 = nn.LayerNorm(DIM, elementwise_affine=True)
        self.in_proj = nn.Linear(DIM, 3 * DIM)
        self.out_proj = nn.Linear(DIM, DIM)
        self.norm2 = nn.LayerNorm(DIM, elementwise_affine=True)
        self.ff = nn.Sequential(nn.Linear(DIM, 2 * DIM), nn.GELU(), nn.Linear(2 * DIM, DIM))

    def forward(self, x):
        qkv = self.in_proj(self.norm1(x)).unflatten(-1, (3, HEADS, DIM // HEADS))
        q, k, v = qkv.permute(2, 0, 3, 1, 4)            # each [batch, heads, seq, head_dim]
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.out_proj(a.transpose(1, 2).flatten(2))
        return x + self.ff(self.norm2(x))


class LM(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, DIM)
        self.pos = nn.Embedding(SEQ, DIM)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.norm = nn.LayerNorm(DIM)
        self.head = nn.Linear(DIM, VOCAB, bias=False)

    def forward(self, idx, tgt):
        x = self.tok(idx) + self.pos(torch.arange(idx.size(1)))
        for b in self.blocks:
            x = b(x)
        logits = self.head(self.norm(x))
        return F.cross_entropy(logits.flatten(0, 1), tgt.flatten())


def build():
    torch.manual_seed(11)
    m = LM().double()
    with torch.no_grad():
        for n, p in m.named_parameters():
            if "norm" in n or n.endswith("bias"):
                p.add_(0.1 * torch.randn_like(p))
    return m


def batch():
    g = torch.Generator().manual_seed(1)
    idx = torch.randint(0, VOCAB, (BATCH, SEQ + 1), generator=g)
    return idx[:, :-1].contiguous(), idx[:, 1:].contiguous()


def optimizer(model):
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    other = [p for n, p in model.named_parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}],
                             lr=1e-3, betas=(0.9, 0.95))


def step(cap):
    model = build()
    idx, tgt = batch()
    cap.params(model)
    cap.input(idx, "idx")
    cap.input(tgt, "tgt")
    opt = optimizer(model)
    cap.optimizer(opt)
    with cap.step():
        loss = model(idx, tgt)
        loss.backward()
        opt.step()
    cap.loss(loss, "loss")
