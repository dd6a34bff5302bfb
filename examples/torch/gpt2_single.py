"""examples/torch/gpt2_single.py - the single-device reference: one training step of the GPT-2
of gpt2.py, as one would write it (forward, loss.backward(), optionally gradient clipping,
opt.step()).  Captured by tools/torch2plan as the single-device program of every gpt2_*.py.
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt2  # noqa: E402


def step(cap):
    c = gpt2.config(cap.args)
    c["ckpt"] = 0  # activation checkpointing (--set ckpt=1) saves the parallel runs' memory only
    model = gpt2.build(c)
    idx, targets = gpt2.batch()
    cap.params(model)
    cap.input(idx, "idx")
    cap.input(targets, "targets")
    opt = gpt2.make_optimizer(c, model.parameters())
    cap.optimizer(opt)
    with cap.step():
        loss = model(idx, targets)
        loss.backward()
        if c["clip"]:
            torch.nn.utils.clip_grad_norm_(model.parameters(), c["clip"])
        opt.step()
    cap.loss(loss, "loss")
