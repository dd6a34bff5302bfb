"""examples/torch/gpt2_pipe.py - the GPT-2 of gpt2.py pipelined over 2 ranks with
torch.distributed.pipelining: rank 0 runs the embeddings and the first block, rank 1 the second
block, the final norm and the head; ScheduleGPipe (--set schedule=1f1b: Schedule1F1B) splits the
batch into --set nm=N microbatches (default 2), sends activations and gradients between the
stages, and averages the microbatches' gradients (scale_grads).  The head is tied to the token
embedding: rank 1 holds its own copy of wte.weight and the two copies' gradients are all-reduced
after the schedule (Megatron's embedding group).  The parallel program of gpt2_single.py
(tools/torch2plan --nproc 2).  Bug (--set bug=NAME): noscale runs the schedule with
scale_grads=False although the loss is a per-microbatch mean (every gradient nm times too large);
drop_mb drops the last microbatch's gradient (its loss keeps the value, detached).
"""
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt2  # noqa: E402


class First(nn.Module):
    """Stage 0: token and position embeddings, block 0 (module paths as in gpt2.GPT2)."""

    def __init__(self, model):
        super().__init__()
        self.wte, self.wpe = model.wte, model.wpe
        self.h = nn.ModuleDict({"0": model.h[0]})

    def forward(self, idx):
        pos = torch.arange(idx.shape[1], device=idx.device)
        return self.h["0"](self.wte(idx) + self.wpe(pos))


class Last(nn.Module):
    """Stage 1: block 1, the final norm and the head (its own copy of the tied weight)."""

    def __init__(self, model):
        super().__init__()
        self.h = nn.ModuleDict({"1": model.h[1]})
        self.ln_f = model.ln_f
        self.head = nn.Parameter(model.wte.weight.detach().clone())

    def forward(self, x):
        return F.linear(self.ln_f(self.h["1"](x)), self.head)


def loss_fn(logits, targets):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def step(cap):
    c = gpt2.config(cap.args)
    nm = int(c["nm"]) if int(c["nm"]) > 1 else 2
    cap.mesh(pp=2)
    model = gpt2.build(c)
    idx, targets = gpt2.batch()
    first = cap.rank == 0
    mod = First(model) if first else Last(model)
    if first:
        cap.params(mod)
        cap.input(idx, "idx")
        tied = mod.wte.weight
    else:
        cap.params(mod.h, prefix="h.")
        cap.params(mod.ln_f, prefix="ln_f.")
        cap.param(mod.head, "wte.weight")     # the tied head: the last stage's copy
        cap.input(targets, "targets")
        tied = mod.head
    b = gpt2.BATCH // nm
    x_meta = torch.empty(b, gpt2.BLOCK, gpt2.N_EMBD, dtype=torch.float64, device="meta")
    ins = torch.empty(b, gpt2.BLOCK, dtype=torch.long, device="meta") if first else x_meta
    outs = x_meta if first else torch.empty(b, gpt2.BLOCK, gpt2.VOCAB, dtype=torch.float64, device="meta")
    stage = PipelineStage(mod, cap.rank, 2, torch.device("cpu"), input_args=ins, output_args=outs)
    sched = Schedule1F1B if c["schedule"] == "1f1b" else ScheduleGPipe
    lf = loss_fn
    if c["bug"] == "drop_mb":   # BUG: the last microbatch's loss keeps its value, not its gradient
        seen = []

        def lf(logits, targets):
            seen.append(1)
            loss = loss_fn(logits, targets)
            return loss.detach() + 0 * loss if len(seen) == nm else loss
    schedule = sched(stage, n_microbatches=nm, loss_fn=lf, scale_grads=c["bug"] != "noscale")
    opt = gpt2.make_optimizer(c, mod.parameters())
    cap.optimizer(opt)
    losses = []
    with cap.step():
        if first:
            schedule.step(idx)
        else:
            schedule.step(target=targets, losses=losses)
        dist.all_reduce(tied.grad)            # the embedding group: both copies of wte.weight
        opt.step()
        if not first:
            logged = sum(losses) / len(losses)   # the mean of the microbatches' mean losses
    if not first:
        cap.loss(logged, "loss")
