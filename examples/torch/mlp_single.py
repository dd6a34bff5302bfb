"""examples/torch/mlp_single.py - a small classifier written the way one writes it in PyTorch:
nn.Sequential of Linear layers with an activation between them, nn.CrossEntropyLoss, AdamW with
weight decay and clip_grad_norm_.  The single-device reference of mlp_ddp.py.
--set act=relu|tanh|sigmoid|gelu|silu chooses the hidden activations (default relu, tanh).
--set loss=gather: the cross-entropy written out by hand, -log_softmax(logits).gather(1, y).mean().
"""
import torch
import torch.nn as nn

torch.set_default_dtype(torch.float64)

ACTS = {"relu": nn.ReLU, "tanh": nn.Tanh, "sigmoid": nn.Sigmoid, "gelu": nn.GELU, "silu": nn.SiLU}


def make(cap):
    torch.manual_seed(0)
    names = cap.args.get("act", "relu,tanh").split(",")
    first, second = ACTS[names[0]](), ACTS[names[-1]]()
    return nn.Sequential(nn.Linear(12, 32), first, nn.Linear(32, 32), second, nn.Linear(32, 5))


def criterion(cap):
    """nn.CrossEntropyLoss, or the same loss written out (--set loss=gather)."""
    if cap.args.get("loss") == "gather":
        return lambda logits, y: -torch.log_softmax(logits, -1).gather(1, y.unsqueeze(1)).mean()
    return nn.CrossEntropyLoss()


def data():
    g = torch.Generator().manual_seed(1)
    return torch.randn(8, 12, generator=g), torch.randint(0, 5, (8,), generator=g)


def step(cap):
    model = make(cap)
    x, y = data()
    cap.params(model)
    cap.input(x, "x")
    cap.input(y, "y")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    cap.optimizer(opt)
    crit = criterion(cap)
    with cap.step():
        loss = crit(model(x), y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    cap.loss(loss, "loss")
