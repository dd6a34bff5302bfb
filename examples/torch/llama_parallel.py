"""examples/torch/llama_parallel.py - the same tiny Llama written for N CPU ranks by hand:
Megatron-style tensor parallelism (column/row-parallel linears with their all_reduces, a
vocab-parallel head), optional sequence parallelism, a GPipe pipeline (send/recv between
stages, microbatches) and data parallelism (per-gradient all_reduce or a bucketed reducer),
with SGD or Adam, untied or tied (tie=1) embedding and output weights.  Configured by
torch2plan --set tp=2 pp=2 dp=2 nm=2 sp=1 opt=adam bucket=1 tie=1.

Tied weights (tie=1), as Megatron-LM does it: the first pipeline stage (the embedding) and the
last (the output head) each hold a full copy of tok.weight, and after the backward pass each
pair of peers (same TP and DP coordinates) all_reduces the copies' gradients over an
"embedding group", so that both copies take the same update.  The tied head is not
vocab-parallel: every TP rank multiplies its tokens by the whole weight (under sequence
parallelism its own part of the sequence, so its loss and weight gradient are partial sums
over TP).  With one pipeline stage the same tensor serves both uses and no group is needed.

The classic hand-written bugs are one-line changes behind --set bug=NAME (grep BUG):
  no_allreduce   the row-parallel linear forgets its all_reduce
  grad_scale     the gradient is scaled by the world size instead of the DP group size (the loss
                 divisor with avg=loss, the default; the reducer's divisor with avg=grad)
  pp_recv        pipeline peers crossed: a stage receives from the wrong TP rank
  dp_noavg       the DP reducer sums without averaging, although each replica's loss is its own
                 mean (avg=loss: the loss is divided by nm, not nm * dp; avg=grad: the reducer
                 does not divide)
  no_sp_gather   the sequence-parallel all_gather before the column-parallel block is missing
  tie_noreduce   tie=1: the embedding group's all_reduce of the tied weight's gradient is
                 missing, so the two pipeline stages' copies drift apart
Two bugs that live outside the plan (verdict proves the plan EQUIVALENT; `verdict compare` on
the real run's values finds them, docs/noise.md):
  lowprec        TP rank 1 runs the MLP's down projection (w2) in bfloat16 (a kernel setting)
  data           the data loader hands DP replica 1 the next replica's sample (another row)
"""
import os
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (BATCH, EPS, HEAD_DIM, HEADS, HIDDEN, LAYERS, SEQ, VOCAB,  # noqa: E402
                    batch, config, dtype, full_weights, make_optimizer, rope_tables)
from torchcap import Shard  # noqa: E402


class G:
    """This rank's parallel context (set in step)."""
    tp = pp = dp = nm = 1
    t = s = d = 0
    sp = False
    tie = False
    bug = ""
    avg = "grad"
    tp_group = dp_group = emb_group = None
    wire = None                                       # dtype of all_gather buffers


# ---- communication in bfloat16 -----------------------------------------------------------------

class Bf16Dist:
    """Stands in for torch.distributed in a bfloat16 run (--set dtype=bfloat16): gloo (CPU, torch
    1.13) has no bfloat16, so these communicate in float32 and round the result back, as
    mixed-precision frameworks reduce in float32 (all_gathers gather G.wire = float32 values and
    concatenate them before rounding back, so that the gather and the cat stay one operator).  Everything else is torch.distributed's (looked
    up at call time: torch2plan wraps those functions during the step)."""
    def __getattr__(self, name):
        return getattr(torch.distributed, name)

    def all_reduce(self, t, group=None):
        w = t.float()
        torch.distributed.all_reduce(w, group=group)
        t.copy_(w)

    def send(self, t, dst):
        torch.distributed.send(t.float(), dst=dst)

    def recv(self, t, src):
        w = torch.empty(t.shape, dtype=torch.float32)
        torch.distributed.recv(w, src=src)
        t.copy_(w)


# ---- tensor-parallel regions ----------------------------------------------------------------

def _gather(x, dim):
    parts = [torch.zeros_like(x, dtype=G.wire) for _ in range(G.tp)]
    dist.all_gather(parts, x.contiguous().to(G.wire), group=G.tp_group)
    return torch.cat(parts, dim=dim).to(x.dtype)


def _reduce_scatter(x, dim):
    x = x.clone()
    dist.all_reduce(x, group=G.tp_group)
    return x.chunk(G.tp, dim=dim)[G.t].contiguous()


class CopyToTP(torch.autograd.Function):
    """Input of a column-parallel block: identity forward, all_reduce of the gradient."""
    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        g = g.clone()
        dist.all_reduce(g, group=G.tp_group)
        return g


class ReduceFromTP(torch.autograd.Function):
    """Output of a row-parallel linear: all_reduce of the partial sums."""
    @staticmethod
    def forward(ctx, x):
        x = x.clone()
        if G.bug != "no_allreduce":
            dist.all_reduce(x, group=G.tp_group)
        return x

    @staticmethod
    def backward(ctx, g):
        return g


class GatherFromSP(torch.autograd.Function):
    """Sequence parallelism: all_gather the sequence before a column-parallel block."""
    @staticmethod
    def forward(ctx, x):
        parts = [torch.zeros_like(x, dtype=G.wire) for _ in range(G.tp)]
        if G.bug != "no_sp_gather":
            dist.all_gather(parts, x.contiguous().to(G.wire), group=G.tp_group)
        return torch.cat(parts, dim=1).to(x.dtype)

    @staticmethod
    def backward(ctx, g):
        return _reduce_scatter(g, 1)


class ScatterToSP(torch.autograd.Function):
    """Sequence parallelism: reduce-scatter the row-parallel output over the sequence."""
    @staticmethod
    def forward(ctx, x):
        return _reduce_scatter(x, 1)

    @staticmethod
    def backward(ctx, g):
        return _gather(g, 1)


class GatherVocab(torch.autograd.Function):
    """Vocab-parallel logits: all_gather forward, own slice of the gradient backward."""
    @staticmethod
    def forward(ctx, x):
        return _gather(x, -1)

    @staticmethod
    def backward(ctx, g):
        return g.chunk(G.tp, dim=-1)[G.t].contiguous()


def enter_tp(x):
    if G.tp == 1:
        return x
    return GatherFromSP.apply(x) if G.sp else CopyToTP.apply(x)


def leave_tp(x):
    if G.tp == 1:
        return x
    return ScatterToSP.apply(x) if G.sp else ReduceFromTP.apply(x)


# ---- the model --------------------------------------------------------------------------------

def rmsnorm(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * w


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def attention(x, p, W, cos, sin, mask):
    x = enter_tp(x)
    b, s, _ = x.shape
    hl = HEADS // G.tp
    q = F.linear(x, W[p + "wq.weight"]).view(b, s, hl, HEAD_DIM)
    k = F.linear(x, W[p + "wk.weight"]).view(b, s, hl, HEAD_DIM)
    v = F.linear(x, W[p + "wv.weight"]).view(b, s, hl, HEAD_DIM)
    q = q * cos + rotate_half(q) * sin
    k = k * cos + rotate_half(k) * sin
    q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    scores = q @ k.transpose(-2, -1) * (HEAD_DIM ** -0.5) + mask
    o = torch.softmax(scores, dim=-1) @ v
    o = o.transpose(1, 2).reshape(b, s, hl * HEAD_DIM)
    return leave_tp(F.linear(o, W[p + "wo.weight"]))


def mlp(x, p, W):
    x = enter_tp(x)
    h = F.silu(F.linear(x, W[p + "w1.weight"])) * F.linear(x, W[p + "w3.weight"])
    if G.bug == "lowprec" and G.t == 1:               # BUG: this rank's kernel runs in bfloat16
        lo = torch.bfloat16
        return leave_tp(F.linear(h.to(lo), W[p + "w2.weight"].to(lo)).to(h.dtype))
    return leave_tp(F.linear(h, W[p + "w2.weight"]))


def my_layers():
    per = LAYERS // G.pp
    return range(G.s * per, (G.s + 1) * per)


def stage_forward(W, h, cos, sin, mask):
    if G.s == 0:
        h = F.embedding(h, W["tok.weight"])
    for i in my_layers():
        p = "layers.%d." % i
        h = h + attention(rmsnorm(h, W[p + "attn_norm.weight"]), p, W, cos, sin, mask)
        h = h + mlp(rmsnorm(h, W[p + "mlp_norm.weight"]), p, W)
    if G.s == G.pp - 1:
        h = rmsnorm(h, W["norm.weight"])
        if G.tie:                                      # the whole vocabulary on every TP rank
            return F.linear(h, W["tok.weight"])
        h = F.linear(enter_tp(h), W["head.weight"])
        if G.tp > 1:
            h = GatherVocab.apply(h)
    return h


# ---- placement: which slice of each full weight this rank holds --------------------------------

COLUMN = ("wq", "wk", "wv", "w1", "w3")
ROW = ("wo", "w2")


def owned(name):
    if name == "tok.weight":
        return G.s == 0 or (G.tie and G.s == G.pp - 1)
    if name in ("norm.weight", "head.weight"):
        return G.s == G.pp - 1
    return int(name.split(".")[1]) in my_layers()


def placement(name):
    short = name.split(".")[-2]
    if short in COLUMN or name == "head.weight":
        return {"tp": Shard(0)}
    if short in ROW:
        return {"tp": Shard(1)}
    return {}


def local_slice(full, pl):
    if "tp" in pl:
        return full.chunk(G.tp, dim=pl["tp"].dim)[G.t]
    return full


def sp_partial(name):
    """Replicated weights whose gradient is a partial sum over TP under sequence parallelism."""
    return G.sp and G.tp > 1 and (name.endswith("norm.weight") or name == "tok.weight")


def tied_sp_loss():
    """Under tie=1 and sequence parallelism each TP rank's loss covers its own tokens only."""
    return G.tie and G.sp and G.tp > 1


def embedding_group(cap):
    """The tied weight's group of this rank: its first- and last-stage peers.  Every rank
    creates every group, in the same order (a torch.distributed rule)."""
    mine = None
    for d in range(G.dp):
        for t in range(G.tp):
            g = dist.new_group([cap.rank_of(tp=t, pp=0, dp=d), cap.rank_of(tp=t, pp=G.pp - 1, dp=d)])
            if (t, d) == (G.t, G.d):
                mine = g
    return mine


# ---- one training step ---------------------------------------------------------------------------

def loss_divisor():
    """Each microbatch's loss is a mean over its tokens; avg=loss (the default) divides it by
    nm * dp so that the summed gradients are the global mean's, avg=grad divides by nm only and
    the DP reducer averages (DDP's way)."""
    if G.avg != "loss":
        return G.nm
    if G.bug == "dp_noavg":
        return G.nm                                   # BUG: the replica's own mean, summed by the reducer
    if G.bug == "grad_scale":
        return G.nm * dist.get_world_size()           # BUG: the world size, not the DP group size
    return G.nm * G.dp


def peer(stage):
    """Global rank of this rank's pipeline peer in `stage` (same TP and DP coordinates)."""
    t = G.t if G.bug != "pp_recv" else (G.t + 1) % G.tp
    return G.cap.rank_of(tp=t, pp=stage, dp=G.d)


def step(cap):
    c = config(cap.args)
    G.tp, G.pp, G.dp, G.nm, G.sp, G.bug = c["tp"], c["pp"], c["dp"], c["nm"], bool(c["sp"]), c["bug"]
    G.tie = bool(c["tie"])
    G.cap = cap
    G.avg = c["avg"]
    me = cap.mesh(tp=G.tp, pp=G.pp, dp=G.dp, mb=G.nm)
    G.t, G.s, G.d = me["tp"], me["pp"], me["dp"]
    G.tp_group = cap.group("tp")
    G.dp_group = cap.group("dp")
    if G.tie and G.pp > 1:
        G.emb_group = embedding_group(cap)
    b = BATCH // (G.dp * G.nm)
    sl = SEQ // G.tp if G.sp else SEQ

    W = {}
    G.dt = dtype(c)
    G.wire = torch.float32 if G.dt == torch.bfloat16 else G.dt
    if G.dt == torch.bfloat16:
        globals()["dist"] = Bf16Dist()
    for n, full in full_weights(G.tie).items():
        if owned(n):
            pl = placement(n)
            W[n] = local_slice(full, pl).to(G.dt).clone().requires_grad_()
            cap.param(W[n], n, **pl)
    tokens, labels = batch()
    cos, sin, mask = (t.to(G.dt) for t in rope_tables())
    for t, n in ((cos, "rope.cos"), (sin, "rope.sin"), (mask, "mask")):
        cap.input(t, n)
    toks, labs = [], []
    for m in range(G.nm):
        rows = slice((G.d * G.nm + m) * b, (G.d * G.nm + m + 1) * b)
        if G.s == 0:
            tk = tokens[rows]
            if G.bug == "data" and G.d == 1:           # BUG: the loader hands this replica another sample
                tk = torch.roll(tokens, -b, dims=0)[rows]
            if G.sp:
                tk = tk[:, G.t * sl:(G.t + 1) * sl]
                cap.input(tk.clone(), "tokens", mb_index=m, dp=Shard(0), mb=Shard(0), tp=Shard(1))
            else:
                cap.input(tk.clone(), "tokens", mb_index=m, dp=Shard(0), mb=Shard(0))
            toks.append(cap.decls[-1].tensor)
        if G.s == G.pp - 1:
            if tied_sp_loss():
                cap.input(labels[rows][:, G.t * sl:(G.t + 1) * sl].clone(), "labels", mb_index=m,
                          dp=Shard(0), mb=Shard(0), tp=Shard(1))
            else:
                cap.input(labels[rows].clone(), "labels", mb_index=m, dp=Shard(0), mb=Shard(0))
            labs.append(cap.decls[-1].tensor)
    params = list(W.values())
    opt = make_optimizer(c, params)
    cap.optimizer(opt)

    with cap.step():
        ins, outs, losses = [], [], []
        for m in range(G.nm):                          # forward of every microbatch (GPipe)
            if G.s == 0:
                x = toks[m]
            else:
                x = torch.empty(b, sl, HIDDEN, dtype=G.dt)
                dist.recv(x, src=peer(G.s - 1))
                x.requires_grad_()
            y = stage_forward(W, x, cos, sin, mask)
            if G.s == G.pp - 1:
                y = F.cross_entropy(y.view(-1, VOCAB), labs[m].view(-1)) / loss_divisor()
                if tied_sp_loss():
                    y = y / G.tp                       # this rank's tokens: part of the mean
                losses.append(y)
            else:
                dist.send(y.detach(), dst=peer(G.s + 1))
            ins.append(x)
            outs.append(y)
        for m in range(G.nm):                          # backward of every microbatch
            if G.s == G.pp - 1:
                outs[m].backward()
            else:
                g = torch.empty(b, sl, HIDDEN, dtype=G.dt)
                dist.recv(g, src=peer(G.s + 1))
                torch.autograd.backward(outs[m], g)
            if G.s > 0:
                dist.send(ins[m].grad, dst=peer(G.s - 1))
        for n, p in W.items():                         # sequence-parallel partial gradients
            if sp_partial(n):
                dist.all_reduce(p.grad, group=G.tp_group)
        if G.emb_group is not None and G.bug != "tie_noreduce":   # tied copies: one gradient
            dist.all_reduce(W["tok.weight"].grad, group=G.emb_group)
        if G.dp > 1:                                   # data-parallel gradient reducer
            scale = G.dp if G.avg == "grad" else 1
            if G.bug == "grad_scale" and G.avg == "grad":
                scale = dist.get_world_size()         # BUG: the world size, not the DP group size
            if c["bucket"]:
                flat = torch.cat([p.grad.view(-1) for p in params])
                dist.all_reduce(flat, group=G.dp_group)
                if G.bug != "dp_noavg" or G.avg != "grad":
                    flat.div_(scale)
                off = 0
                for p in params:
                    p.grad.copy_(flat[off:off + p.numel()].view_as(p.grad))
                    off += p.numel()
            else:
                for p in params:
                    dist.all_reduce(p.grad, group=G.dp_group)
                    if G.bug != "dp_noavg" or G.avg != "grad":
                        p.grad.div_(scale)
        opt.step()
        if G.s == G.pp - 1:                            # the logged loss: mean over the global batch
            loss = sum(x.detach() for x in losses)
            if tied_sp_loss():
                dist.all_reduce(loss, group=G.tp_group)
            if G.dp > 1:
                dist.all_reduce(loss, group=G.dp_group)
                if G.avg == "grad":
                    loss = loss / G.dp
    if G.s == G.pp - 1:
        cap.loss(loss, "loss")
