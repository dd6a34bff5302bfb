"""examples/torch/vocab_single.py - the single-device reference of vocab_model.py, written the
natural way: nn.Embedding, nn.Linear, F.cross_entropy, SGD."""
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vocab_model as vm  # noqa: E402


class Model(nn.Module):
    def __init__(self, w):
        super().__init__()
        self.wte = nn.Embedding(vm.VOCAB, vm.HIDDEN)
        self.fc = nn.Linear(vm.HIDDEN, vm.HIDDEN)
        self.head = nn.Linear(vm.HIDDEN, vm.VOCAB, bias=False)
        with torch.no_grad():
            self.wte.weight.copy_(w["wte"])
            self.fc.weight.copy_(w["fc.weight"])
            self.fc.bias.copy_(w["fc.bias"])
            self.head.weight.copy_(w["head"])

    def forward(self, ids, targets):
        h = F.gelu(self.fc(self.wte(ids)), approximate="tanh")
        logits = self.head(h)
        return F.cross_entropy(logits.view(-1, vm.VOCAB), targets.view(-1))


def step(cap):
    vm.config(cap.args)   # --set vocab=V
    model = Model(vm.weights()).double()
    ids, targets = vm.batch()
    cap.params(model)
    cap.input(ids, "ids")
    cap.input(targets, "targets")
    opt = torch.optim.SGD(model.parameters(), lr=vm.LR)
    cap.optimizer(opt)
    with cap.step():
        loss = model(ids, targets)
        loss.backward()
        opt.step()
    cap.loss(loss, "loss")
