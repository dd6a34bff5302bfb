import torch, torch.nn as nn, torch.nn.functional as F
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(24, 16)
        self.head = nn.Linear(32, 5)

    def forward(self, ids, y):
        x = self.embed(ids)
        mu = x.mean(-1, keepdim=True); var = x.var(-1, keepdim=True, unbiased=False)
        pass
        return F.cross_entropy(self.head(torch.cat([x.mean(dim=1), x[:, -1]], dim=-1)), y)
def build():
    torch.manual_seed(5); return M().double()
def data():
    g = torch.Generator().manual_seed(3)
    return torch.randint(0, 24, (8, 8), generator=g), torch.randint(0, 5, (8,), generator=g)
def step(cap):
    m = build(); ids, y = data()
    cap.params(m); cap.input(ids, "ids"); cap.input(y, "y")
    opt = torch.optim.Adam(m.parameters(), lr=1e-3); cap.optimizer(opt)
    with cap.step():
        loss = m(ids, y); loss.backward(); opt.step()
    cap.loss(loss, "loss")
