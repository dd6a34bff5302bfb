"""tests/torch/tiny_single.py - a two-layer MLP step, the single-device side of the capture
error tests (tests/e2e/41_torch_errors.sh).  --set variant=NAME injects one capture problem."""
import torch

torch.set_default_dtype(torch.float64)


def data():
    g = torch.Generator().manual_seed(0)
    return (torch.randn(8, 4, generator=g), torch.randn(4, 8, generator=g),
            torch.randn(6, 4, generator=g), torch.randint(0, 4, (6,), generator=g))


def step(cap):
    w1, w2, x, y = data()
    v = cap.args.get("variant", "")
    w1.requires_grad_()
    w2.requires_grad_()
    cap.param(w1, "w1")
    cap.param(w2, "w2")
    cap.input(x, "x")
    if v == "unread":
        cap.input(torch.ones(6, 4), "unused")
    cap.input(y, "y")
    bias = torch.ones(8)
    opt = torch.optim.SGD([w1, w2], lr=0.1)
    cap.optimizer(opt)
    with cap.step():
        h = x @ w1.t()
        if v == "unmapped":
            h = torch.cumsum(h, dim=1)
        if v == "undeclared":
            h = h + bias
        if v == "item" and float(h.sum()) > 1e9:
            h = h * 2
        z = torch.nn.functional.silu(h) @ w2.t()
        loss = torch.nn.functional.cross_entropy(z, y)
        loss.backward()
        opt.step()
    cap.loss(loss, "loss")
