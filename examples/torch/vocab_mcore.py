"""examples/torch/vocab_mcore.py - vocab_model.py split over the vocabulary with Megatron-Core's
own layers (megatron.core.tensor_parallel on CPU ranks with gloo): the token embedding is
VocabParallelEmbedding, the head holds the rank's vocabulary rows, and the loss is
vocab_parallel_cross_entropy (max, all_reduce MAX, the target logit of the rank's range,
sum-exp, all_reduce SUM, Megatron's own backward).  The parallel program of vocab_single.py
(--nproc TP, --set tp=TP).  The embedding's placement comes from Megatron-Core's marks; the head's
is declared.  Bug (--set bug=no_copy): the head reads h without copy_to_tensor_model_parallel_region,
so the gradient of h is one rank's part instead of the sum over the group.
"""
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vocab_model as vm  # noqa: E402
from torchcap import Shard  # noqa: E402


def step(cap):
    from megatron.core import parallel_state, tensor_parallel
    from megatron.core.model_parallel_config import ModelParallelConfig
    c = vm.config(cap.args)
    tp = c["tp"] if c["tp"] > 1 else cap.world
    cap.mesh(tp=tp)
    parallel_state.initialize_model_parallel(tensor_model_parallel_size=tp)
    rank = parallel_state.get_tensor_model_parallel_rank()
    w = vm.weights()
    rows = vm.VOCAB // tp
    cfg = ModelParallelConfig(tensor_model_parallel_size=tp, use_cpu_initialization=True,
                              params_dtype=torch.float64)
    emb = tensor_parallel.VocabParallelEmbedding(vm.VOCAB, vm.HIDDEN, init_method=lambda t: t, config=cfg)
    with torch.no_grad():
        emb.weight.copy_(w["wte"][rank * rows:(rank + 1) * rows])
    fc_w = w["fc.weight"].clone().requires_grad_()
    fc_b = w["fc.bias"].clone().requires_grad_()
    head = w["head"][rank * rows:(rank + 1) * rows].clone().requires_grad_()
    cap.param(emb.weight, "wte.weight")   # tp Shard(0) from Megatron-Core's marks
    cap.param(fc_w, "fc.weight")
    cap.param(fc_b, "fc.bias")
    cap.param(head, "head.weight", tp=Shard(0))
    ids, targets = vm.batch()
    cap.input(ids, "ids")
    cap.input(targets, "targets")
    params = [emb.weight, fc_w, fc_b, head]
    opt = torch.optim.SGD(params, lr=vm.LR)
    cap.optimizer(opt)
    with cap.step():
        h = F.gelu(F.linear(emb(ids), fc_w, fc_b), approximate="tanh")
        if c["bug"] != "no_copy":   # BUG no_copy: the gradient of h is not summed over the group
            h = tensor_parallel.copy_to_tensor_model_parallel_region(h)
        loss = tensor_parallel.vocab_parallel_cross_entropy(F.linear(h, head), targets).mean()
        loss.backward()
        opt.step()
    cap.loss(loss, "loss")
