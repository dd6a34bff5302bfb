"""examples/torch/vocab_tp.py - vocab_model.py tensor parallel (--set tp=T) x data parallel
(--set dp=D): the token embedding is Megatron's VocabParallelEmbedding (megatron_vocab.py, each
TP rank holds VOCAB/T rows); fc and the head are replicated; each DP replica takes its rows of
the batch and the gradients are averaged over the DP group with all_reduce.
--set fill=masked_fill: the embedding's masks applied with masked_fill instead of index_put_.
--set ce=vocab: the head is split over the vocabulary too and the loss is Megatron's
vocab_parallel_cross_entropy.
Bugs (--set bug=NAME): vocab_shard makes TP rank 1 look up with rank 0's vocabulary range;
with ce=vocab: no_max_reduce skips the all_reduce(MAX) of the cross-entropy (a bug: each rank
then subtracts its own max M_r, and the summed sum_r exp(-M_r) S_r is not exp(-M) sum_r S_r
unless the maxes agree; verdict exec DISAGREEs), ce_shard gives every rank rank 0's target
range, no_head_reduce leaves out the sum over TP of the head input's gradient.
"""
import os
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import megatron_vocab as mv  # noqa: E402
import vocab_model as vm  # noqa: E402
from torchcap import Shard  # noqa: E402


def step(cap):
    c = vm.config(cap.args)
    me = cap.mesh(tp=c["tp"], dp=c["dp"])
    t, d = me["tp"], me["dp"]
    tp_group, dp_group = cap.group("tp"), cap.group("dp")
    w = vm.weights()
    rows = vm.VOCAB // c["tp"]
    start = t * rows
    wte = w["wte"][start:start + rows].clone().requires_grad_()
    fc_w = w["fc.weight"].clone().requires_grad_()
    fc_b = w["fc.bias"].clone().requires_grad_()
    vocab_ce = c["ce"] == "vocab"
    head = (w["head"][start:start + rows] if vocab_ce else w["head"]).clone().requires_grad_()
    cap.param(wte, "wte.weight", tp=Shard(0))
    cap.param(fc_w, "fc.weight")
    cap.param(fc_b, "fc.bias")
    cap.param(head, "head.weight", **({"tp": Shard(0)} if vocab_ce else {}))
    ids, targets = vm.batch()
    b = vm.BATCH // c["dp"]
    ids = ids[d * b:(d + 1) * b].clone()
    targets = targets[d * b:(d + 1) * b].clone()
    cap.input(ids, "ids", dp=Shard(0))
    cap.input(targets, "targets", dp=Shard(0))
    params = [wte, fc_w, fc_b, head]
    opt = torch.optim.SGD(params, lr=vm.LR)
    cap.optimizer(opt)
    emb_start = 0 if c["bug"] == "vocab_shard" else start   # BUG: every rank uses rank 0's range
    emb = mv.VocabParallelEmbedding(wte, emb_start, tp_group, fill=c["fill"])
    with cap.step():
        h = F.gelu(F.linear(emb(ids), fc_w, fc_b), approximate="tanh")
        if vocab_ce:
            # the head is split over its outputs: the gradient of h is summed over the TP group
            logits = F.linear(h if c["bug"] == "no_head_reduce" else mv.copy_to_tp(h, tp_group), head)
            ce_start = 0 if c["bug"] == "ce_shard" else start   # BUG: rank 0's target range
            per_token = mv.vocab_parallel_cross_entropy(logits, targets, ce_start, tp_group,
                                                        reduce_max=c["bug"] != "no_max_reduce")
            loss = per_token.mean()
        else:
            logits = F.linear(h, head)
            loss = F.cross_entropy(logits.view(-1, vm.VOCAB), targets.view(-1))
        loss.backward()
        for p in params:
            if c["dp"] > 1:
                dist.all_reduce(p.grad, group=dp_group)
                p.grad.div_(c["dp"])
        opt.step()
        logged = loss.detach().clone()
        if c["dp"] > 1:
            dist.all_reduce(logged, group=dp_group)     # the logged loss: the mean over replicas
            logged.div_(c["dp"])
    cap.loss(logged, "loss")
